#!/usr/bin/env bash
# stop-postgres.sh stops the throwaway PostgreSQL that ensure-postgres.sh
# started for the tests (its data directory, PGDATA_DIR), and nothing else:
# a server someone else runs is left alone.
set -euo pipefail
PGPORT=${PGPORT:-55432}
PGDATA_DIR=${PGDATA_DIR:-/tmp/contentbackup-pg-$PGPORT}
if [ ! -f "$PGDATA_DIR/postmaster.pid" ]; then
  echo "stop-postgres: no server of ours is running in $PGDATA_DIR" >&2
  exit 0
fi
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ "$(id -u)" -eq 0 ]; then
  su postgres -s /bin/bash -c "'$bindir/pg_ctl' -D '$PGDATA_DIR' -m fast -w stop" >&2
else
  "$bindir/pg_ctl" -D "$PGDATA_DIR" -m fast -w stop >&2
fi
echo "stop-postgres: stopped the test server in $PGDATA_DIR (its data stays until you delete it)" >&2
