#!/usr/bin/env bash
# Runs every fuzz target in scripts/fuzz-targets for its number of inputs, or for
# FUZZTIME (a count like 1000000x, or a duration) when set. With --report FILE, writes
# a table of the inputs each target ran, how long it took, and new corpus entries.
# A count, not a duration, by default: Go 1.26's fuzz coordinator can fail a duration
# run with a bare "context deadline exceeded" when a busy worker misses the deadline
# (go.dev/issue/75804); a count has no deadline to miss.
set -euo pipefail
cd "$(dirname "$0")/.."
report=""
[ "${1:-}" = --report ] && report=$2
[ -n "$report" ] && printf '| target | package | inputs | seconds | new interesting |\n|---|---|---|---|---|\n' > "$report"
grep -v '^#' scripts/fuzz-targets | while read -r name pkg count; do
  [ -n "$name" ] || continue
  budget=${FUZZTIME:-${count}x}
  start=$(date +%s)
  log=$(mktemp)
  if ! go test -run='^$' -fuzz="^${name}\$" -fuzztime="$budget" -fuzzminimizetime=1s "$pkg" 2>&1 | tee "$log"; then
    rm -f "$log"
    exit 1
  fi
  if [ -n "$report" ]; then
    last=$(grep 'fuzz: elapsed' "$log" | tail -1)
    execs=$(sed -n 's/.*execs: \([0-9]*\).*/\1/p' <<<"$last")
    new=$(sed -n 's/.*new interesting: \([0-9]*\).*/\1/p' <<<"$last")
    printf '| %s | %s | %s | %s | %s |\n' "$name" "$pkg" "${execs:-?}" "$(( $(date +%s) - start ))" "${new:-0}" >> "$report"
  fi
  rm -f "$log"
done
