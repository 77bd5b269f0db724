#!/usr/bin/env bash
# Makes what docker-compose.yaml mounts, beside this script: a development
# CA with server and client certificates (tls/), an operator token (token,
# mode 0600) whose SHA-256 digest goes into policy.yaml, the key that
# signs page tokens, and the replicas' shared key-encryption key (keys/). Run it once from the repository root:
#
#   bash deploy/compose/setup.sh
#
# Plain tokens are never written into the policy, only their digests.
# OUT=dir writes them elsewhere (the tests do).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
here="${OUT:-$repo/deploy/compose}"
mkdir -p "$here"
here="$(cd "$here" && pwd)"
cd "$repo"

go run ./tools/gencerts -out "$here/tls" -host localhost -host 127.0.0.1 -host server -client archivectl
umask 077
if [ ! -s "$here/token" ]; then
  od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$here/token"
fi
digest=$(tr -d '\n' < "$here/token" | sha256sum | cut -d' ' -f1)
umask 022
cat > "$here/policy.yaml" <<POLICY
# Written by deploy/compose/setup.sh. The operator may do everything for
# every owner; it proves itself with the token in deploy/compose/token or
# with the client certificate tls/client.crt (CN=archivectl).
principals:
  - name: ops
    tokens_sha256: [$digest]
    certificates: ["CN=archivectl"]
    scopes: [admin]
    owners: ["*"]
POLICY
od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$here/page-token.key"
# The key-encryption key both replicas wrap backups' data keys with: 32
# raw bytes, made once (a new one would strand every backup wrapped by the
# old). Readable by the container's user, which is not this one: a local
# setup only; in production --job-key-keeper names a KMS key.
mkdir -p "$here/keys"
if [ ! -s "$here/keys/kek.key" ]; then
  head -c 32 /dev/urandom > "$here/keys/kek.key"
  chmod 0644 "$here/keys/kek.key"
fi
echo "compose: wrote $here/{tls/,token,policy.yaml,page-token.key,keys/kek.key}"
