#!/usr/bin/env bash
# ensure-postgres.sh starts the tests' own PostgreSQL and prints the admin
# URL the tests use (TEST_DATABASE_URL).
#
# It is a throwaway server on 127.0.0.1:55432 (PGPORT), in its own data
# directory (PGDATA_DIR), never whatever else answers on a port: the
# machine's own PostgreSQL on 5432, or another checkout's, is left alone.
#   - ours already running (its postmaster.pid names the port): used;
#   - the port answered by a server that is not ours: refused, naming the
#     port and what to do (set TEST_DATABASE_URL to use it on purpose);
#   - otherwise the machine's PostgreSQL is started on the data directory
#     with trust authentication on loopback only, installing Debian's
#     postgresql package first when it is missing (needs root).
# PostgreSQL refuses to run as root, so as root the server runs as the
# postgres user. Progress goes to stderr; only the URL goes to stdout.
set -euo pipefail

PGPORT=${PGPORT:-55432}
PGDATA_DIR=${PGDATA_DIR:-/tmp/contentbackup-pg-$PGPORT}
URL="postgres://postgres@127.0.0.1:${PGPORT}/postgres?sslmode=disable"

log() { echo "ensure-postgres: $*" >&2; }

answers() {
  if command -v pg_isready >/dev/null; then
    pg_isready -q -h 127.0.0.1 -p "$PGPORT"
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$PGPORT") 2>/dev/null
  fi
}

# ours: the server on the port is the one running in PGDATA_DIR (the
# fourth line of postmaster.pid is its port, and its process lives).
ours() {
  [ -f "$PGDATA_DIR/postmaster.pid" ] || return 1
  local pid port
  pid=$(sed -n 1p "$PGDATA_DIR/postmaster.pid")
  port=$(sed -n 4p "$PGDATA_DIR/postmaster.pid")
  [ "$port" = "$PGPORT" ] && kill -0 "$pid" 2>/dev/null
}

if answers; then
  if ours; then
    log "using the tests' server in $PGDATA_DIR on 127.0.0.1:$PGPORT"
    echo "$URL"
    exit 0
  fi
  log "127.0.0.1:$PGPORT answers, but not with the tests' server (no live postmaster.pid in $PGDATA_DIR naming that port)."
  log "Stop what listens there, choose another port (PGPORT=55433 make test), or use that server on purpose: TEST_DATABASE_URL=$URL make test"
  exit 1
fi

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    log "PostgreSQL is not installed and installing it needs root: run 'sudo apt-get install postgresql' or set TEST_DATABASE_URL"
    exit 1
  fi
  log "installing Debian's postgresql"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  # The package starts its own cluster on 5432; the tests run their own,
  # so stop it.
  if command -v pg_ctlcluster >/dev/null; then
    for c in $(ls /etc/postgresql 2>/dev/null); do pg_ctlcluster "$c" main stop >&2 2>/dev/null || true; done
  fi
  bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    su postgres -s /bin/bash -c "$*"
  else
    bash -c "$*"
  fi
}

if [ "$(id -u)" -eq 0 ]; then
  mkdir -p "$PGDATA_DIR"
  chown postgres:postgres "$PGDATA_DIR"
  chmod 700 "$PGDATA_DIR"
fi
if [ ! -f "$PGDATA_DIR/PG_VERSION" ]; then
  log "initdb in $PGDATA_DIR"
  as_pg "'$bindir/initdb' -D '$PGDATA_DIR' -U postgres -A trust -E UTF8 --no-locale" >&2
fi
log "starting $bindir/postgres on 127.0.0.1:$PGPORT"
# fsync off: the data directory is throwaway test state.
as_pg "'$bindir/pg_ctl' -D '$PGDATA_DIR' -l '$PGDATA_DIR/server.log' -w -t 60 \
  -o \"-h 127.0.0.1 -p $PGPORT -k /tmp -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200\" start" >&2

for _ in $(seq 1 60); do
  answers && { echo "$URL"; exit 0; }
  sleep 1
done
log "the server did not answer; its log:"
tail -n 50 "$PGDATA_DIR/server.log" >&2 || true
exit 1
