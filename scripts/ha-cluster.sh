#!/usr/bin/env bash
# ha-cluster.sh runs a highly available PostgreSQL on this machine for the
# failover test (make ha): Debian's pg_auto_failover, a monitor and two
# nodes with synchronous replication, as the postgres user.
#
#   ha-cluster.sh up        start it (installing Debian's packages when
#                           missing, which needs root); prints the multi-host
#                           URL the server connects with
#   ha-cluster.sh primary   prints the primary's port
#   ha-cluster.sh kill      kills the primary node outright (its keeper and
#                           its postgres, SIGKILL), as a machine dying would
#   ha-cluster.sh state     the monitor's view
#   ha-cluster.sh down      stops everything and removes the data
#
# The monitor's timeouts are tightened for the test (TIGHT below); the
# production defaults and what they mean are in docs/ha.md.
set -euo pipefail

DIR=${HA_DIR:-/tmp/contentbackup-ha}
MONITOR_PORT=${HA_MONITOR_PORT:-6000}
NODE_PORTS=(${HA_NODE_PORTS:-6001 6002})
DB=app
MONITOR_URL="postgres://autoctl_node@127.0.0.1:${MONITOR_PORT}/pg_auto_failover?sslmode=disable"

log() { echo "ha-cluster: $*" >&2; }

# as_pg runs a command as the postgres user (PostgreSQL refuses root).
# pg_autoctl keeps each node's configuration and state under the XDG
# directories, keyed by its data directory: they live inside $DIR, so that
# removing $DIR leaves nothing a later run would mistake for its own.
as_pg() {
  local env="export PATH=$BINDIR:\$PATH XDG_CONFIG_HOME=$DIR/xdg/config XDG_DATA_HOME=$DIR/xdg/data XDG_RUNTIME_DIR=$DIR/xdg/run;"
  if [ "$(id -u)" -eq 0 ]; then
    su postgres -s /bin/bash -c "$env $*"
  else
    bash -c "$env $*"
  fi
}

install() {
  if command -v pg_autoctl >/dev/null && ls /usr/lib/postgresql/*/lib/pgautofailover.so >/dev/null 2>&1; then
    return
  fi
  if [ "$(id -u)" -ne 0 ]; then
    log "pg_auto_failover is not installed and installing it needs root: apt-get install postgresql-15-auto-failover pg-auto-failover-cli"
    exit 1
  fi
  log "installing Debian's pg_auto_failover"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15-auto-failover pg-auto-failover-cli >&2
}

psql_at() { # port sql
  "$BINDIR/psql" -qAtX -h 127.0.0.1 -p "$1" -U postgres -d "${3:-postgres}" -c "$2"
}

state() { as_pg "pg_autoctl show state --pgdata $DIR/monitor" 2>/dev/null; }

primary_port() {
  psql_at "$MONITOR_PORT" "select nodeport from pgautofailover.node where reportedstate in ('primary','wait_primary','single') and goalstate = reportedstate order by nodeid limit 1" pg_auto_failover
}

# Tightened for the test: health checks every second, a node unhealthy
# after 3 s and a primary demoted after 5 s without its keeper (defaults:
# 5 s, 20 s, 30 s).
TIGHT="
  ALTER SYSTEM SET pgautofailover.health_check_period = 1000;
  ALTER SYSTEM SET pgautofailover.health_check_timeout = 1000;
  ALTER SYSTEM SET pgautofailover.health_check_max_retries = 1;
  ALTER SYSTEM SET pgautofailover.health_check_retry_delay = 500;
  ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = 3000;
  ALTER SYSTEM SET pgautofailover.primary_demote_timeout = 5000;
  ALTER SYSTEM SET pgautofailover.startup_grace_period = 2000;
  SELECT pg_reload_conf();"

up() {
  install
  BINDIR=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  down_quiet
  for port in "$MONITOR_PORT" "${NODE_PORTS[@]}"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      log "something already listens on 127.0.0.1:$port: stop it, or set HA_MONITOR_PORT and HA_NODE_PORTS"
      exit 1
    fi
  done
  mkdir -p "$DIR/xdg/config" "$DIR/xdg/data" "$DIR/xdg/run"
  chmod 700 "$DIR/xdg/run"
  [ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$DIR"
  log "monitor on $MONITOR_PORT"
  as_pg "pg_autoctl create monitor --pgdata $DIR/monitor --pgport $MONITOR_PORT --hostname 127.0.0.1 --auth trust --no-ssl >$DIR/monitor.log 2>&1"
  as_pg "nohup pg_autoctl run --pgdata $DIR/monitor >>$DIR/monitor.log 2>&1 &"
  for i in $(seq 1 100); do psql_at "$MONITOR_PORT" "select 1" pg_auto_failover >/dev/null 2>&1 && break; sleep 0.2; done
  echo "$TIGHT" | "$BINDIR/psql" -qAtX -h 127.0.0.1 -p "$MONITOR_PORT" -U postgres -d pg_auto_failover >/dev/null
  local n=1
  for port in "${NODE_PORTS[@]}"; do
    log "node$n on $port"
    as_pg "nohup pg_autoctl create postgres --pgdata $DIR/node$n --pgport $port --hostname 127.0.0.1 --name node$n --dbname $DB --monitor '$MONITOR_URL' --auth trust --no-ssl --run >$DIR/node$n.log 2>&1 &"
    # One node at a time: the first becomes the primary.
    for i in $(seq 1 150); do [ -n "$(primary_port 2>/dev/null)" ] && break; sleep 0.2; done
    n=$((n + 1))
  done
  # The standby's base backup waits for a checkpoint on the primary; ask
  # for one instead of waiting for the next timed one.
  # Usually seconds; a loaded machine has taken over a minute to finish
  # the standby's base backup (a CI run failed at 60 s with node2 still
  # catching up), so allow three.
  for i in $(seq 1 360); do
    if [ "$(psql_at "$MONITOR_PORT" "select count(*) from pgautofailover.node where reportedstate = 'secondary' and goalstate = 'secondary'" pg_auto_failover 2>/dev/null)" = "1" ] &&
       [ "$(psql_at "$MONITOR_PORT" "select count(*) from pgautofailover.node where reportedstate = 'primary' and goalstate = 'primary'" pg_auto_failover 2>/dev/null)" = "1" ]; then
      hosts=$(printf "127.0.0.1:%s," "${NODE_PORTS[@]}")
      echo "postgres://postgres@${hosts%,}/$DB?sslmode=disable&target_session_attrs=read-write"
      return
    fi
    p=$(primary_port 2>/dev/null || true)
    [ -n "$p" ] && psql_at "$p" "CHECKPOINT" >/dev/null 2>&1 || true
    sleep 0.5
  done
  state >&2 || true
  for n in $(seq 1 ${#NODE_PORTS[@]}); do
    echo "--- the end of node$n.log:" >&2
    tail -n 20 "$DIR/node$n.log" >&2 || true
  done
  log "the cluster did not reach primary + secondary in 180 s"
  exit 1
}

kill_primary() {
  BINDIR=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  local port n
  port=$(primary_port)
  n=$(psql_at "$MONITOR_PORT" "select nodename from pgautofailover.node where nodeport = $port" pg_auto_failover)
  log "killing $n (port $port)"
  kill_tree "$DIR/$n( |\$)"
  echo "$port"
}

# kill_tree kills, with SIGKILL, every process whose command line
# matches pattern (a node's keeper and its postgres) and their children
# (the keeper's "pg_autoctl: start/stop postgres", postgres's backends).
kill_tree() {
  local pids
  pids=$(pgrep -f "$1" || true)
  for pid in $pids; do
    pkill -9 -P "$pid" 2>/dev/null || true
    kill -9 "$pid" 2>/dev/null || true
  done
}

down_quiet() {
  kill_tree "$DIR"
  sleep 0.5
  kill_tree "$DIR"
  rm -rf "$DIR"
}

BINDIR=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
case "${1:-}" in
  up) up ;;
  primary) primary_port ;;
  kill) kill_primary ;;
  state) state ;;
  down) down_quiet ;;
  *) echo "usage: $0 up|primary|kill|state|down" >&2; exit 2 ;;
esac
