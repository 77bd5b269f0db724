# syntax=docker/dockerfile:1
# Build: docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t contentbackup:$(git describe --tags --always --dirty) .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-X main.buildVersion=${VERSION}" -o /out/server ./cmd/server \
 && CGO_ENABLED=0 go build -trimpath -ldflags "-X main.buildVersion=${VERSION}" -o /out/archivectl ./cmd/archivectl \
 && mkdir -p /out/data

# distroless: no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/server /usr/local/bin/server
# The operator CLI, for `kubectl exec … archivectl export|import|verify`.
COPY --from=build /out/archivectl /usr/local/bin/archivectl
# The embedded store's directory, owned by the unprivileged user; mount a
# volume here, or set DATABASE_URL to use Postgres instead.
COPY --from=build --chown=65532:65532 /out/data /var/lib/contentbackup
VOLUME /var/lib/contentbackup
# Every interface inside the container, so TLS and a policy are required:
# the server refuses to start without them (mount them at these paths, or
# set JWT_JWKS/JWT_ISSUER/JWT_AUDIENCE and AUTH_POLICY= for JWTs alone;
# INSECURE=true only behind a mesh that encrypts).
ENV LISTEN_ADDR=0.0.0.0:50051 \
    METRICS_ADDR=0.0.0.0:9464 \
    LOG_FORMAT=json \
    DATA_DIR=/var/lib/contentbackup \
    TLS_CERT=/etc/contentbackup/tls/tls.crt \
    TLS_KEY=/etc/contentbackup/tls/tls.key \
    AUTH_POLICY=/etc/contentbackup/policy/policy.yaml
EXPOSE 50051 9464
# Numeric, so Kubernetes' runAsNonRoot can verify it (a name it cannot).
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/server"]
