#!/usr/bin/env bash
# phases.sh runs make targets one after another, as make test's phases,
# printing each one's wall time as it ends and all of them at the end
# (the README's and TESTING.md's cold and warm figures come from it). The
# first failure stops the run, naming the phase.
set -uo pipefail
make=${MAKE:-make}
times=()
begin=$(date +%s)
report() {
  echo "== phases: ${times[*]:-none}; $(( $(date +%s) - begin )) s in all"
}
for phase in "$@"; do
  start=$(date +%s)
  echo "== make $phase"
  if ! "$make" --no-print-directory "$phase"; then
    echo "== make $phase failed after $(( $(date +%s) - start )) s"
    report
    exit 1
  fi
  took=$(( $(date +%s) - start ))
  echo "== make $phase: $took s"
  times+=("$phase ${took}s")
done
report
