#!/usr/bin/env bash
# Load run of the live server on loopback with ghz: Decode of a 200-byte
# text, DecodeBatch of 1,000 such texts and Decode of a 1 MiB attachment,
# beside an empty unary RPC (grpc.health.v1.Health/Check) on the same server
# in the same run as the ceiling. The calls alternate, ROUNDS times, so
# that the machine's drift falls on each alike. Bounded: each call lasts
# DURATION.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
CONCURRENCY=${CONCURRENCY:-16}
ADDR=${ADDR:-127.0.0.1:50151}
GHZ=${GHZ:-$(go env GOPATH)/bin/ghz}

go build -o bin/server ./cmd/server
go run ./tools/benchdata -o bin/benchdata
bin/server --listen "$ADDR" --log-level warn --data-dir "$(mktemp -d)" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  "$GHZ" --insecure --call grpc.health.v1.Health.Check -d '{}' -n 1 "$ADDR" >/dev/null 2>&1 && break
  sleep 0.1
done

run() { # name call args...
  local name=$1 call=$2
  shift 2
  echo "== $name ($call, concurrency $CONCURRENCY, $DURATION)"
  "$GHZ" --insecure --call "$call" -c "$CONCURRENCY" -z "$DURATION" --connections 2 "$@" "$ADDR" |
    grep -E 'Count:|Requests/sec:|50 % in|99 % in|Error distribution|\[[A-Za-z]+\]' || true
}

for round in $(seq "$ROUNDS"); do
  echo "# round $round of $ROUNDS"
  run "empty unary RPC (ceiling)" grpc.health.v1.Health.Check -d '{}'
  run "Decode 200-byte text" contentbackup.v1.ContentService.Decode -B bin/benchdata/decode_text.bin
  run "DecodeBatch 1000 x 200-byte text" contentbackup.v1.ContentService.DecodeBatch -B bin/benchdata/decode_batch.bin
  CONCURRENCY=4 run "Decode 1 MiB attachment" contentbackup.v1.ContentService.Decode -B bin/benchdata/decode_attachment.bin
done
