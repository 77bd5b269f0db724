# syntax=docker/dockerfile:1
# Build: docker build --build-arg VERSION=$(git describe --always --dirty) -t contentbackup .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-X main.buildVersion=${VERSION}" -o /out/server ./cmd/server \
 && CGO_ENABLED=0 go build -trimpath -o /out/archivectl ./cmd/archivectl \
 && mkdir -p /out/data

# distroless: no shell, no package manager, runs as an unprivileged user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/server /usr/local/bin/server
# The operator CLI, for `kubectl exec … archivectl export|import|verify`.
COPY --from=build /out/archivectl /usr/local/bin/archivectl
# The embedded store's directory, owned by the unprivileged user; mount a
# volume here, or set DATABASE_URL to use Postgres instead.
COPY --from=build --chown=nonroot:nonroot /out/data /var/lib/contentbackup
VOLUME /var/lib/contentbackup
# Listen on every interface inside the container; the default is loopback.
ENV LISTEN_ADDR=0.0.0.0:50051 \
    METRICS_ADDR=0.0.0.0:9464 \
    LOG_FORMAT=json \
    DATA_DIR=/var/lib/contentbackup
EXPOSE 50051 9464
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/server"]
