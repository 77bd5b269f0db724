#!/usr/bin/env bash
# ensure-citus.sh makes a real Citus cluster answer on loopback (a
# coordinator on 25432 and two workers on 25433 and 25434) for make citus,
# with the scripts of ../shared/citus (CITUS_DIR): install.sh puts Citus
# 13.2.2 into Debian's PostgreSQL 15, cluster.sh starts the nodes. It
# prints two lines for the tests' environment:
#
#   TEST_DATABASE_URL=postgres://postgres@127.0.0.1:25432/postgres?sslmode=disable
#   TEST_CITUS_WORKERS=127.0.0.1:25433,127.0.0.1:25434
#
# Progress goes to stderr. Needs root the first time (install.sh).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { echo "ensure-citus: $*" >&2; }

if [ -z "${CITUS_DIR:-}" ]; then
  for d in "$here/../shared/citus" /work/shared/citus; do
    [ -x "$d/cluster.sh" ] && { CITUS_DIR=$(cd "$d" && pwd); break; }
  done
fi
[ -n "${CITUS_DIR:-}" ] && [ -x "$CITUS_DIR/cluster.sh" ] || {
  log "no Citus scripts: set CITUS_DIR to the folder holding install.sh and cluster.sh (../shared/citus)"
  exit 1
}

# Debian's PostgreSQL 15 is what install.sh builds against.
if [ ! -x /usr/lib/postgresql/15/bin/postgres ]; then
  log "installing Debian's postgresql-15"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 postgresql-client-15 >/dev/null
fi
if [ ! -f /usr/lib/postgresql/15/lib/citus.so ]; then
  log "installing Citus (../shared/citus/install.sh)"
  # install.sh's own load check starts a scratch server in a temporary
  # folder, which fails on some machines where the cluster itself runs;
  # the cluster below is the check that counts.
  "$CITUS_DIR/install.sh" || [ -f /usr/lib/postgresql/15/lib/citus.so ] || exit 1
fi

BASE=${BASE:-/tmp/citus-cluster} "$CITUS_DIR/cluster.sh" up >/dev/null
admin="postgres://postgres@127.0.0.1:25432/postgres?sslmode=disable"
for _ in $(seq 1 30); do
  psql -qAt "$admin" -c "SELECT 1" >/dev/null 2>&1 && break
  sleep 1
done
# The cluster really distributes: a scratch database, a table distributed
# over both workers.
check=$("$CITUS_DIR/cluster.sh" db citus_check)
PGOPTIONS="-c client_min_messages=warning" psql -qAt "$check" -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
DROP TABLE IF EXISTS probe;
CREATE TABLE probe (owner text PRIMARY KEY);
SELECT create_distributed_table('probe', 'owner');
INSERT INTO probe VALUES ('a'), ('b'), ('c');
DROP TABLE probe;
SQL
log "Citus $(psql -qAt "$check" -c "SELECT citus_version()" | awk '{print $2}') answers on 127.0.0.1:25432 with $(psql -qAt "$check" -c "SELECT count(*) FROM citus_get_active_worker_nodes()") workers"
echo "TEST_DATABASE_URL=$admin"
echo "TEST_CITUS_WORKERS=127.0.0.1:25433,127.0.0.1:25434"
