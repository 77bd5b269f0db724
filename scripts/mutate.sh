#!/usr/bin/env bash
# mutate.sh runs gremlins (mutation testing) over the packages that hold the
# service's rules, one package at a time, and prints each package's score:
# killed mutants over killed and lived ones (a lived mutant is a changed
# operator that no test noticed). TESTING.md keeps the scores and the
# survivors with their reasons.
#
#   scripts/mutate.sh [package-dir...]     default: every rule package
#
# MUTATE_OUT (default mutation/) receives each package's JSON and log.
# MUTATE_MIN_EFFICACY, when set, fails the run if a package scores below it
# (make mutate-sample, which CI runs, sets it).
set -euo pipefail
cd "$(dirname "$0")/.."

gremlins=${GREMLINS:-gremlins}
out=${MUTATE_OUT:-mutation}
workers=${MUTATE_WORKERS:-2}
# A mutant's test run is timed out at this multiple of the coverage run;
# the coverage run reuses a warm build cache, a mutant's run compiles, so
# the default of gremlins (a few times) times out every mutant here.
coefficient=${MUTATE_TIMEOUT_COEFFICIENT:-40}
min=${MUTATE_MIN_EFFICACY:-}

if [ $# -gt 0 ]; then
  pkgs=("$@")
else
  pkgs=(internal/records internal/auth internal/server/authz internal/archive internal/backup internal/preview internal/jobs)
fi

mkdir -p "$out"
status=0
printf '%-24s %7s %6s %6s %8s %8s %9s\n' package killed lived timeout uncovered efficacy duration
for p in "${pkgs[@]}"; do
  name=$(echo "$p" | tr / _)
  start=$(date +%s)
  if ! "$gremlins" unleash --workers "$workers" --timeout-coefficient "$coefficient" \
      -o "$out/$name.json" "./$p" >"$out/$name.log" 2>&1; then
    echo "gremlins failed on $p; see $out/$name.log" >&2
    status=1
    continue
  fi
  took=$(( $(date +%s) - start ))
  read -r killed lived timedout uncovered < <(sed -n \
    -e 's/^Killed: \([0-9]*\), Lived: \([0-9]*\), Not covered: \([0-9]*\)$/\1 \2 \3/p' \
    -e 's/^Timed out: \([0-9]*\),.*/T \1/p' "$out/$name.log" | paste -sd' ' | awk '{print $1, $2, $5, $3}')
  total=$(( killed + lived ))
  efficacy=$(awk -v k="$killed" -v t="$total" 'BEGIN { if (t == 0) print "n/a"; else printf "%.1f%%", 100 * k / t }')
  printf '%-24s %7s %6s %6s %8s %8s %8ss\n' "$p" "$killed" "$lived" "$timedout" "$uncovered" "$efficacy" "$took"
  grep -E '^ +LIVED ' "$out/$name.log" | sed "s|^ *LIVED |    lived: |; s| at | $p/|" || true
  if [ -n "$min" ] && [ "$total" -gt 0 ] && awk -v k="$killed" -v t="$total" -v m="$min" 'BEGIN { exit !(100 * k / t < m) }'; then
    echo "$p: efficacy $efficacy is below $min%" >&2
    status=1
  fi
done
exit $status
