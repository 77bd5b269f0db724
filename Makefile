# Pinned code generators: regeneration is reproducible on any machine with Go.
BUF_VERSION              := v1.75.0
PROTOC_GEN_GO_VERSION    := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.0
PROTOC_GEN_GO_VTPROTO_VERSION := v0.6.0
STATICCHECK_VERSION      := v0.8.2
GHZ_VERSION              := v0.93.0
GRPCURL_VERSION          := v1.9.3
# The OpenAPI document of the HTTP/JSON routes (tools/openapi).
PROTOC_GEN_OPENAPIV2_VERSION := v2.34.0
# Mutation testing (make mutate, scripts/mutate.sh; TESTING.md).
GREMLINS_VERSION         := v0.6.0
# The S3-compatible server the job tests write to (cmd/server/jobs_test.go).
VERSITYGW_VERSION        := v1.8.0
# promtool, for the alert rules' unit tests (make check-alerts): Prometheus
# v3.16's Go module version.
PROMTOOL_VERSION         := v0.316.0
# helm, for the chart's lint and render check (make deploy-check).
HELM_VERSION             := v4.3.2

# The reference client (@xmtp/wasm-bindings) declares Node >= 22; Debian 12
# ships 20. The interop tests run on Node from the npm registry's
# platform package, installed once under .tools/.
NODE_VERSION := 22.23.3
NODE_PKG     := node-linux-$(shell uname -m | sed 's/x86_64/x64/;s/aarch64/arm64/')
NODE_DIR     := $(CURDIR)/.tools/node-$(NODE_VERSION)
NODE_BIN     := $(NODE_DIR)/node_modules/$(NODE_PKG)/bin

GOBIN ?= $(shell go env GOPATH)/bin
TOOLS_BIN := $(CURDIR)/.tools/bin
export PATH := $(NODE_BIN):$(TOOLS_BIN):$(GOBIN):$(PATH)

# go-tool installs package $(1) at version $(2) into .tools/bin unless that
# version is there already; $(3) are go install's flags.
define go-tool
	@stamp="$(TOOLS_BIN)/.$(notdir $(1))@$(2)"; \
	if [ -x "$(TOOLS_BIN)/$(notdir $(1))" ] && [ -f "$$stamp" ]; then :; else \
		echo "tools: building $(notdir $(1))@$(2) into .tools/bin (once)"; \
		GOBIN="$(TOOLS_BIN)" go install $(3) $(1)@$(2) && rm -f "$(TOOLS_BIN)/.$(notdir $(1))@"* && touch "$$stamp"; fi
endef

# An execution count rather than a duration: go1.26's fuzz coordinator can
# report a spurious 'context deadline exceeded' when a -fuzztime duration
# ends (golang/go#75804, fixed in go1.27). 100000 runs take 5-15 s here.
FUZZTIME ?= 100000x

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.buildVersion=$(VERSION)

.PHONY: mutate mutate-sample stress racy
.PHONY: deploy-check go-test client-deps ports bench-fleet soak history-soak run build image breaking node tools generate lint test check citus citus-stop bench-citus fuzz bench-smoke check-generated interop-deps interop-soak interop-large retention-golden check-alerts ha bench bench-store bench-container bench-archive bench-chain bench-restore restore-soak bench-preview bench-rotation load postgres postgres-stop reliability

run:
	go run ./cmd/server

build:
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/server ./cmd/server
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/archivectl ./cmd/archivectl

# image builds the container image tagged with the same version (needs a
# Docker engine, which CI machines do not have).
image:
	docker build --build-arg VERSION=$(VERSION) -t contentbackup:$(VERSION) .

# breaking fails when the API breaks wire or source compatibility with the
# last release, whose image api/releases/ keeps (buf build -o at the tag).
breaking:
	go run ./tools/protodeps -out api/third_party
	cd api && buf breaking --against releases/v0.2.0.binpb $(API_PATHS)

# tools builds each pinned Go tool once into .tools/bin (first on make's
# PATH): a stamp names the version, so later runs reuse the binary and a
# new pin rebuilds it. promtool too, at the pinned Prometheus release,
# rather than Debian's whole Prometheus server, and without the service
# discovery plugins (remove_all_sd), which rule tests never use.
tools:
	@mkdir -p "$(TOOLS_BIN)"
	$(call go-tool,github.com/bufbuild/buf/cmd/buf,$(BUF_VERSION))
	$(call go-tool,google.golang.org/protobuf/cmd/protoc-gen-go,$(PROTOC_GEN_GO_VERSION))
	$(call go-tool,google.golang.org/grpc/cmd/protoc-gen-go-grpc,$(PROTOC_GEN_GO_GRPC_VERSION))
	$(call go-tool,github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto,$(PROTOC_GEN_GO_VTPROTO_VERSION))
	$(call go-tool,github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2,$(PROTOC_GEN_OPENAPIV2_VERSION))
	$(call go-tool,honnef.co/go/tools/cmd/staticcheck,$(STATICCHECK_VERSION))
	$(call go-tool,github.com/fullstorydev/grpcurl/cmd/grpcurl,$(GRPCURL_VERSION))
	$(call go-tool,github.com/versity/versitygw/cmd/versitygw,$(VERSITYGW_VERSION))
	$(call go-tool,github.com/go-gremlins/gremlins/cmd/gremlins,$(GREMLINS_VERSION))
	$(call go-tool,github.com/prometheus/prometheus/cmd/promtool,$(PROMTOOL_VERSION),-tags remove_all_sd)
	$(call go-tool,helm.sh/helm/v4/cmd/helm,$(HELM_VERSION))

# api/third_party gets the Google API files the API imports, printed from the
# Go modules go.mod pins (tools/protodeps); only our own files are linted
# and generated.
API_PATHS := --path contentbackup --path xmtp
# The TypeScript client's code (clients/typescript/src/gen) is generated
# too, by the protoc-gen-es its package-lock.json pins; the Python client's
# stubs are made by protoc when its test runs (clients/python/generate.sh).
CLIENT_API_PATHS := --path contentbackup/v1 --path xmtp --path third_party/google/rpc
generate: client-deps
	go run ./tools/protodeps -out api/third_party
	cd api && buf lint $(API_PATHS) && buf generate $(API_PATHS)
	rm -rf clients/typescript/src/gen
	cd api && buf generate --template buf.gen.typescript.yaml $(CLIENT_API_PATHS)
	go run ./tools/openapi -api api -out api/openapi/contentbackup.swagger.json

# check-generated fails when the committed generated code differs from a fresh generation.
check-generated: generate
	git diff --exit-code -- api clients
	test -z "$$(git status --porcelain -- api clients)"

# client-deps installs the TypeScript client's packages (Connect-ES, its
# code generator, TypeScript) from its lock file; test/clients runs it and
# the Python client (Debian's python3-grpcio, protoc) against the server.
client-deps: node clients/typescript/node_modules/.package-lock.json

clients/typescript/node_modules/.package-lock.json: clients/typescript/package-lock.json
	cd clients/typescript && npm ci --no-audit --no-fund

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	go vet ./...
	go vet -tags 'ha citus' ./test/...
	staticcheck ./...
	staticcheck -tags 'ha citus' ./test/...
	go run ./tools/codesize -check tools/codesize/allowed.txt

# node installs the pinned Node (see NODE_VERSION) from the npm registry.
node:
	@test -x "$(NODE_BIN)/node" || npm install --no-audit --no-fund --prefix "$(NODE_DIR)" "$(NODE_PKG)@$(NODE_VERSION)"
	@echo "node $$(node --version) from $$(command -v node)"

interop-deps: node
	cd interop && npm ci --no-audit --no-fund

# test is the README's test command: everything CI runs, phase by phase,
# each phase's wall time printed as it ends (scripts/phases.sh). The store
# tests need PostgreSQL: TEST_DATABASE_URL when set, else the tests' own
# server on 127.0.0.1:55432 (scripts/ensure-postgres.sh starts it; it never
# uses whatever else answers on a port).
TEST_PHASES := ports tools interop-deps client-deps lint check-generated breaking check-alerts deploy-check go-test bench-smoke fuzz
test:
	@MAKE="$(MAKE)" bash scripts/phases.sh $(TEST_PHASES)

# go-test is make test's main phase: every package under the race detector.
go-test:
	@url="$${TEST_DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then url=$$(bash scripts/ensure-postgres.sh) || exit 1; fi; \
	echo "go test -race -count=1 ./... (TEST_DATABASE_URL=$$url)"; \
	echo "go test: building every package and its tests with the race detector first; on a cold cache that takes several minutes on 2 cores, and the first line of results comes after it"; \
	TEST_DATABASE_URL="$$url" go test -race -count=1 -skip '^TestCitus' ./...

# ports fails in make test's first second when a port its tests need is
# taken (the README's dev server, left running).
ports:
	@bash scripts/ports-free.sh 50051 50052

# bench-smoke runs each cheap benchmark once, so that one whose setup broke
# (benchmarks compile with the tests but only run here) fails make test;
# the figures come from make bench and its siblings.
bench-smoke:
	go test -count=1 -run '^$$' -bench . -benchtime 1x ./internal/codec ./internal/contentapi ./internal/archive ./internal/wire
	go test -count=1 -run '^$$' -bench 'GRPCDecode' -benchtime 1x ./internal/server

# deploy-check lints the Helm chart (helm at HELM_VERSION) and decodes its
# rendered output, for the default values and with every option on and
# off, strictly into the Kubernetes API types; and loads the compose file
# with the compose-spec loader. Its own module (deploy/check), so the
# server's go.mod carries no Kubernetes library.
deploy-check: tools
	cd deploy/check && go vet ./... && staticcheck ./... && go test -count=1 ./...

# check-alerts checks the Prometheus alert rules and runs their unit tests
# with promtool, built at PROMTOOL_VERSION by make tools.
check-alerts: tools
	promtool check rules deploy/prometheus/contentbackup-alerts.yml
	promtool test rules deploy/prometheus/contentbackup-alerts_test.yml

# reliability reproduces each finding of the byte-budget issue against the
# real server over TCP, on both engines, and asserts its fix (RELIABILITY.md
# records the figures it logs). make test runs the same tests under -race.
reliability:
	@url="$${TEST_DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then url=$$(bash scripts/ensure-postgres.sh) || exit 1; fi; \
	TEST_DATABASE_URL="$$url" go test -count=1 -v -run 'Reliability' ./internal/server

# interop-soak runs the differential generator against the reference
# client for SOAK_SEEDS seeds: SOAK_SHAPES single-record shapes, and
# SOAK_BATCHES batches of SOAK_BATCH_RECORDS records in each direction
# (make test runs one seed of 300 shapes and 3 batches of 80 each way);
# each seed's verdicts land in interop/soak-<seed>*.json.
SOAK_SEEDS ?= 1 2 3 4 5 6 7 8 9 10
SOAK_SHAPES ?= 2000
SOAK_BATCHES ?= 10
SOAK_BATCH_RECORDS ?= 150
interop-soak: interop-deps
	cd interop && for seed in $(SOAK_SEEDS); do \
		go test -count=1 -timeout 60m -run '^(TestReferenceRules_DifferentialGenerator|TestGeneratorBatches_.*)$$' . -v \
			-gen.seed=$$seed -gen.shapes=$(SOAK_SHAPES) -gen.batches=$(SOAK_BATCHES) -gen.batch-records=$(SOAK_BATCH_RECORDS) \
			-gen.report=$$PWD/soak-$$seed.json | grep -E 'seed [0-9]+|imported|FAIL|ok' || exit 1; \
	done

# retention-golden rewrites internal/jobs/testdata/restic_forget.json from
# restic itself: a repository of a simulated year of snapshots (kept in
# RESTIC_GOLDEN_REPO between runs; restic takes about 5 min to write it)
# and what `restic forget --dry-run` keeps under each rule set that
# TestRetentionKeepsResticsSet holds our calendar retention to.
RESTIC_VERSION := v0.17.3
RESTIC_GOLDEN_REPO ?= /tmp/contentbackup-restic-golden
retention-golden:
	go install github.com/restic/restic/cmd/restic@$(RESTIC_VERSION)
	RESTIC_BIN=$$(go env GOPATH)/bin/restic RESTIC_GOLDEN_REPO=$(RESTIC_GOLDEN_REPO) \
		go test -count=1 -timeout 30m -run '^TestRetentionKeepsResticsSet$$' ./internal/jobs -update-restic

# interop-large exports 100,000 messages into the reference client and
# checks every one byte for byte (make test runs the same at 5,000).
interop-large: interop-deps
	cd interop && go test -count=1 -timeout 30m -v -run '^TestReferenceImportsOurLargeExport$$' . -interop.messages=100000

# ha kills the primary of a real highly available PostgreSQL (Debian's
# pg_auto_failover: a monitor and two synchronous nodes, started by
# scripts/ha-cluster.sh as the postgres user) under writers over gRPC, and
# checks that nothing acknowledged is lost (test/ha; about 30 s; .ci/run
# runs it after make test).
ha:
	go test -tags ha -count=1 -v -timeout 5m -run '^TestFailover$$' ./test/ha/

# check is the fast path: vet, staticcheck and every test once, without the
# race detector or fuzzing; about 5 minutes on 2 cores.
check: tools interop-deps client-deps
	go vet ./...
	@url="$${TEST_DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then url=$$(bash scripts/ensure-postgres.sh) || exit 1; fi; \
	TEST_DATABASE_URL="$$url" go test -count=1 -skip '^TestCitus' ./...

# citus runs the store on a real Citus cluster, a coordinator and two
# workers on loopback (scripts/ensure-citus.sh installs and starts it from
# ../shared/citus; CI runs it): the whole store conformance suite with
# every statement's plan checked (TestCitusRouterPlans), the jobs' and
# backup packages' tests (chains, takeover, verification, quotas, the KEK
# check, export and import, on both engines: Postgres here means the
# cluster), the fleet tests, and a worker stopped and started and
# a worker added with the shards rebalanced under gRPC writers
# (test/citus, build tag citus). TestCitusRouterPlans needs the cluster;
# make test leaves it here by name.
citus:
	@env=$$(bash scripts/ensure-citus.sh) || exit 1; export $$env; \
	echo "make citus: $$env" | tr '\n' ' '; echo; \
	go test -count=1 -timeout 20m -v -run '^TestCitusRouterPlans$$' ./internal/store/postgres && \
	go test -count=1 -timeout 20m ./internal/jobs ./internal/backup && \
	go test -count=1 -timeout 20m -run '^TestFleet' ./cmd/server && \
	go test -tags citus -count=1 -timeout 20m -v ./test/citus/

# bench-citus: appends, a ListMessages page, an export and its import on
# one plain Postgres and on the Citus cluster (coordinator and two workers
# on this machine), side by side in one run; BENCHMARKS.md keeps the
# figures as ratios.
bench-citus:
	@env=$$(bash scripts/ensure-citus.sh) || exit 1; export $$env; \
	plain=$$(bash scripts/ensure-postgres.sh) || exit 1; \
	TEST_PLAIN_DATABASE_URL="$$plain" go test -tags citus -count=1 -run '^$$' -bench '^BenchmarkBeside$$' -benchtime 10x ./test/citus/

# citus-stop stops the Citus cluster make citus started, and removes it.
citus-stop:
	bash ../shared/citus/cluster.sh down

# postgres-stop stops the throwaway PostgreSQL the tests started (and only it).
postgres-stop:
	@bash scripts/stop-postgres.sh

# postgres starts the tests' own PostgreSQL (127.0.0.1:55432) unless it runs.
postgres:
	@bash scripts/ensure-postgres.sh

# Each fuzz target runs for FUZZTIME (go test takes one -fuzz target per run);
# FUZZTIME=2m make fuzz for a longer, duration-bounded search.
FUZZ_TARGETS := \
	internal/contentapi:FuzzDecode internal/codec:FuzzUnmarshalEnvelopeMatchesProto internal/contentapi:FuzzDecodeReply \
	internal/codec:FuzzDecodeTransactionReference internal/codec:FuzzDecodeWalletSendCalls internal/codec:FuzzDecodeActions \
	internal/codec:FuzzDecodeIntent internal/codec:FuzzDecodeLegacyReaction \
	internal/archive:FuzzReader internal/archive:FuzzReaderMutatedArchive \
	internal/archive:FuzzParseElementMatchesProto internal/archive:FuzzAppendElementMatchesProto internal/wire:FuzzConsumeMatchesProtowire internal/wire:FuzzBadUTF8Field \
	internal/server/pagetoken:FuzzPageToken internal/server:FuzzListFilter internal/server:FuzzHTTPRequest internal/contentapi:FuzzMarshalVTMatchesProto internal/contentapi:FuzzDecodeReusingMatchesAlone \
	internal/backup:FuzzChainMerge internal/jobs:FuzzCheckObjectKey internal/server:FuzzJobID internal/keyring:FuzzOpenDataKey internal/history:FuzzHistoryRequest \
	internal/preview:FuzzCut internal/preview:FuzzPreview internal/preview:FuzzJSONCost
fuzz:
	for entry in $(FUZZ_TARGETS); do \
		pkg=$${entry%%:*}; target=$${entry#*:}; \
		go test ./$$pkg -list "^$$target\$$" | grep -qx "$$target" || { echo "make fuzz: $$pkg has no fuzz target $$target"; exit 1; }; \
		go test ./$$pkg -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

bench:
	go test ./internal/codec ./internal/contentapi -run '^$$' -bench . -benchmem -count 1

# bench-preview: what a preview of each message adds to a DecodeBatch
# (issue 26's target: under 20% more, a rate ratio of at least 0.83), on a
# page of 1,000 texts of 200 bytes (the worst case: each body repeats its
# text) end to end and with a client that keeps the bytes, and on a mixed
# page; the server's own work in process (decode, preview, marshal); and
# HTTP/JSON's Decode beside gRPC's. Six rounds, each ratio taken within a
# round.
bench-preview:
	go run ./tools/benchratio -pkg ./internal/contentapi -rounds 6 \
		-ratio 'DecodeResponseText200PreviewMarshal,DecodeResponseText200Marshal,ns/op,0.83'
	go run ./tools/benchratio -pkg ./internal/server -rounds 6 \
		-ratio 'GRPCDecodeBatch1000Preview,GRPCDecodeBatch1000,msgs/s,0.83' \
		-ratio 'GRPCDecodeBatch1000PreviewServerOnly,GRPCDecodeBatch1000ServerOnly,msgs/s,0.83' \
		-ratio 'GRPCDecodeBatchMixedPagePreview,GRPCDecodeBatchMixedPage,msgs/s,0.83' \
		-ratio 'GRPCDecodeBatchDeepRepliesPreview,GRPCDecodeBatchDeepReplies,msgs/s,0.5' \
		-ratio 'HTTPJSONDecodeText200,GRPCDecodeText200,ns/op,-'

# bench-store: ConversationService on both engines, over gRPC and in process,
# beside Postgres's own COPY FROM / COPY TO of the same rows, three rounds,
# each figure printed as a ratio next to its target (BENCHMARKS.md), and
# the most the paged ListMessages can reach over gRPC: COPY TO, then a Go
# client's decode of each page, one after the other.
bench-store:
	@url="$${TEST_DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then url=$$(bash scripts/ensure-postgres.sh) || exit 1; fi; \
	TEST_DATABASE_URL="$$url" go run ./tools/benchratio -pkg ./internal/server -rounds 3 -benchtime 20x \
		-ratio 'ListMessages/postgres/direct,PostgresCopyTo,msgs/s,0.6' \
		-ratio 'ListMessages/postgres/grpc,PostgresCopyTo,msgs/s,0.5' \
		-ratio 'StreamMessages/postgres/grpc,PostgresCopyTo,msgs/s,0.5' \
		-serial 'PostgresCopyTo,ClientDecodePage,msgs/s' \
		-ratio 'AppendMessages/postgres/direct,PostgresCopyFrom,msgs/s,0.5' \
		-ratio 'AppendMessages/postgres/grpc,PostgresCopyFrom,msgs/s,0.5' \
		-floor 'AppendMessages/sqlite/direct,msgs/s,60000' \
		-floor 'AppendMessages/sqlite/grpc,msgs/s,60000'

# bench-rotation: a KEK rotation over 10,000 backups with exports and
# restores running (BenchmarkKEKRotation), on SQLite and on Postgres; the
# old KEK is then removed and every backup opened (figures in
# BENCHMARKS.md).
bench-rotation:
	go test ./internal/jobs -run '^$$' -bench BenchmarkKEKRotation -benchtime 1x -count 3
	@url="$${TEST_DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then url=$$(bash scripts/ensure-postgres.sh) || exit 1; fi; \
	BENCH_ENGINE=postgres TEST_DATABASE_URL="$$url" go test ./internal/jobs -run '^$$' -bench BenchmarkKEKRotation -benchtime 1x -count 3

# bench-container: the archive container's Writer and Reader beside raw
# AES-256-GCM and zstd framing of the same records, and export and import
# in process beside COPY, three rounds, as ratios next to their targets;
# for context, what keeping each plaintext (as Next's callers do) costs the
# raw reading, and Next against that.
bench-container:
	go run ./tools/benchratio -pkg ./internal/archive -rounds 3 \
		-ratio 'Reader,RawDecompressOpen,MB/s,0.8' \
		-ratio 'RawDecompressOpenKept,RawDecompressOpen,MB/s,-' \
		-ratio 'Reader,RawDecompressOpenKept,MB/s,-' \
		-ratio 'ReaderShared,RawDecompressOpen,MB/s,0.8' \
		-ratio 'Writer,RawSealCompress,MB/s,0.8'
	@url="$${TEST_DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then url=$$(bash scripts/ensure-postgres.sh) || exit 1; fi; \
	TEST_DATABASE_URL="$$url" go run ./tools/benchratio -pkg ./internal/backup -rounds 3 -benchtime 5x \
		-ratio 'Export/postgres,ExportCopyTo,msgs/s,0.7' \
		-ratio 'Import/postgres,ImportCopyFrom,msgs/s,0.5'

# bench-chain: what an increment saves. A 1,000,000-message owner (1 KiB
# each, by COPY), a full backup job, then three rounds of 1% new messages
# through the store's append, each timed as an increment of the newest
# backup beside a full backup of the same owner (BENCHMARKS.md). Needs
# about 5 GB of disk and 5 minutes; by hand, not in CI.
CHAINBENCH_FLAGS ?= --messages 1000000 --share 0.01 --rounds 3
bench-chain:
	@url="$${TEST_DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then url=$$(bash scripts/ensure-postgres.sh) || exit 1; fi; \
	db="chainbench_$$(date +%s)"; \
	psql "$$url" -qc "CREATE DATABASE $$db" && \
	go run ./tools/chainbench $(CHAINBENCH_FLAGS) --database-url "$$(echo $$url | sed "s|/postgres?|/$$db?|")"; \
	rc=$$?; psql "$$url" -qc "DROP DATABASE $$db"; exit $$rc

# bench-restore: what restoring a chain costs. bench-chain with six
# increments of 1% over 1,000,000 messages, then the newest increment
# restored (its whole chain read as one snapshot) beside a full backup of
# the same state, alternated, twice each (BENCHMARKS.md). About 10 GB of
# disk and 10 minutes; by hand, not in CI.
bench-restore:
	$(MAKE) bench-chain CHAINBENCH_FLAGS="--messages 1000000 --share 0.01 --rounds 6 --restores 2"

# restore-soak: the restore property tests over many random histories
# (RESTORE_SEEDS per engine through internal/backup and internal/jobs,
# RESTORE_MODEL_SEEDS through the reference client); make test runs a few
# fixed seeds of each. By hand, not in CI.
RESTORE_SEEDS ?= 100
RESTORE_MODEL_SEEDS ?= 20
# bench-fleet: two stores of one engine, FLEET_SMALL and FLEET_LARGE
# owners seeded in SQL from a template owner written through the API, a
# server on each; prints the large/small ratios of append, list, export,
# idle CPU, RSS and start-up (tools/fleetbench). By hand, not in CI
# (figures in BENCHMARKS.md).
FLEET_ENGINE ?= postgres
FLEET_SMALL ?= 10000
FLEET_LARGE ?= 1000000
# FLEET_ENGINE=citus runs the postgres engine on the Citus cluster of
# scripts/ensure-citus.sh (make citus's).
bench-fleet:
	@if [ "$(FLEET_ENGINE)" = citus ]; then \
		env=$$(bash scripts/ensure-citus.sh) || exit 1; export $$env; \
		go run ./tools/fleetbench -engine postgres -small $(FLEET_SMALL) -large $(FLEET_LARGE) -database-url "$$TEST_DATABASE_URL" -citus-workers "$$TEST_CITUS_WORKERS"; \
	else \
		url="$${TEST_DATABASE_URL:-}"; \
		if [ "$(FLEET_ENGINE)" = postgres ] && [ -z "$$url" ]; then url=$$(bash scripts/ensure-postgres.sh) || exit 1; fi; \
		go run ./tools/fleetbench -engine $(FLEET_ENGINE) -small $(FLEET_SMALL) -large $(FLEET_LARGE) -database-url "$$url"; \
	fi

# soak: the built server on PostgreSQL under mixed load for SOAK_DURATION
# (unary calls, exports read whole and cut, abandoned imports, a backup and
# its restore every minute, HTTP/JSON answered and refused, history
# uploads), sampling RSS, heap, goroutines, descriptors, sessions, temp
# files and p99 every 30 s and printing each one's slope per 10 minutes;
# it fails on INTERNAL, UNKNOWN, a failed job or a file not returned. By
# hand, not in CI (figures in RELIABILITY.md).
SOAK_DURATION ?= 1h
soak:
	@url="$${TEST_DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then url=$$(bash scripts/ensure-postgres.sh) || exit 1; fi; \
	go run ./tools/soak -database-url "$$url" -duration $(SOAK_DURATION)

# history-soak: the history server under 100 anonymous clients filling,
# trickling and hanging up while 10 legitimate clients upload and
# download, for HISTORY_SOAK (make test runs it for 6 s).
HISTORY_SOAK ?= 5m
history-soak:
	HISTORY_SOAK=$(HISTORY_SOAK) go test -count=1 -timeout 2h -v -run '^TestHistoryUnderAttack$$' ./internal/history | grep -E 'soak_test|^(--- |ok|FAIL)'

restore-soak: interop-deps
	@url="$${TEST_DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then url=$$(bash scripts/ensure-postgres.sh) || exit 1; fi; \
	TEST_DATABASE_URL="$$url" RESTORE_SEEDS=$(RESTORE_SEEDS) go test -count=1 -timeout 2h -v -run 'RestoreIsTheSnapshot' ./internal/backup ./internal/jobs | grep -E 'records compared|^(--- |ok|FAIL)'; \
	RESTORE_MODEL_SEEDS=$(RESTORE_MODEL_SEEDS) go test -count=1 -timeout 2h -v -run 'TestReferenceRestoresRandomHistories' ./interop | grep -E 'records compared|^(--- |ok|FAIL)'

# bench-archive: three rounds of export and import of 1,000,000 messages
# of 1 KiB on Postgres, each beside its own COPY TO / COPY FROM and raw
# AES-256-GCM + zstd, with the server's peak RSS and CPU profiles
# (BENCHMARKS.md). Needs about 10 GB of disk and 10 minutes; by hand, not
# in CI. ARCHIVEBENCH_FLAGS="--messages 100000 --runs 1" for a quick look.
ARCHIVEBENCH_FLAGS ?= --runs 3 --profile-dir bench/profiles
bench-archive: build
	@url="$${TEST_DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then url=$$(bash scripts/ensure-postgres.sh) || exit 1; fi; \
	db="archivebench_$$(date +%s)"; \
	psql "$$url" -qc "CREATE DATABASE $$db" && \
	mkdir -p bench/profiles && \
	go run ./tools/archivebench --server bin/server $(ARCHIVEBENCH_FLAGS) --database-url "$$(echo $$url | sed "s|/postgres?|/$$db?|")"; \
	status=$$?; psql "$$url" -qc "DROP DATABASE $$db WITH (FORCE)"; exit $$status

# load runs the live server under ghz; by hand, not in CI (figures in BENCHMARKS.md).
load:
	go install github.com/bojand/ghz/cmd/ghz@$(GHZ_VERSION)
	bash bench/load.sh

# mutate runs gremlins over every package that holds the service's rules
# (records, auth, the edge's authorization, archive, backup, preview,
# jobs), one package at a time, and prints each one's score and its
# surviving mutants (TESTING.md keeps them, with the reason each is left).
# By hand: about 55 minutes on 2 cores, most of it internal/jobs.
mutate:
	@url="$${TEST_DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then url=$$(bash scripts/ensure-postgres.sh) || exit 1; fi; \
	TEST_DATABASE_URL="$$url" bash scripts/mutate.sh

# mutate-sample is what CI runs: the three packages whose rules guard the
# door (records, auth, authz), each required to keep the score TESTING.md
# records, so that a test that stops killing a mutant fails CI (about 4
# minutes).
MUTATE_SAMPLE_MIN ?= 95
mutate-sample:
	MUTATE_MIN_EFFICACY=$(MUTATE_SAMPLE_MIN) bash scripts/mutate.sh internal/records internal/auth internal/server/authz

# stress runs the fast packages 20 times over under the race detector,
# by hand, to shake out order- and timing-dependent tests.
STRESS_PKGS ?= ./internal/archive/... ./internal/auth/... ./internal/budget ./internal/codec ./internal/contentapi ./internal/preview ./internal/records ./internal/server/authz ./internal/server/pagetoken ./internal/wire
stress:
	go test -race -count=20 $(STRESS_PKGS)

# racy runs the tests that were once flaky a few more times each (CI runs
# it): TESTING.md says what each raced on and how it was fixed.
RACY_TESTS := ^(TestHTTPConnectClientStreamImport|TestE2EStreamMessagesStalledClient|TestRunnerStopsWhenItsRenewalSaysTakenOver|TestRunnerStopsBeforeItsLeaseWhenRenewalsHang|TestScheduleBuildsChains|TestCallersDeadlineIsTheCallers)$$
racy:
	@url="$${TEST_DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then url=$$(bash scripts/ensure-postgres.sh) || exit 1; fi; \
	TEST_DATABASE_URL="$$url" go test -race -count=5 -run '$(RACY_TESTS)' ./internal/server ./internal/jobs
