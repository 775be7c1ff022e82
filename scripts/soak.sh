#!/usr/bin/env bash
# make soak: one long recording of a multi-threaded workload at 999 Hz (default
# 30 minutes; SOAK=5m for less), outside make test. Prints the recorder's RSS
# each minute, the summary line (lost samples must be 0), and checks that
# rubyperf script, rubyperf report and perf script read the file.
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${SOAK:-30m}
root=${RUBYPERF_CACHE:-$HOME/.cache/rubyperf}/ruby
ruby=${SOAK_RUBY:-$(sed -n 's/^exe=//p' "$(ls -d "$root"/debian-3.1-* | tail -1)/manifest")}
out=${SOAK_OUT:-$(mktemp -d)}
case $dur in *m) secs=$(( ${dur%m} * 60 ));; *s) secs=${dur%s};; *) secs=$dur;; esac
echo "soak: $ruby testdata/ruby/soak.rb for ${secs}s at 999 Hz into $out/soak.data"

bin/rubyperf record -F 999 -o "$out/soak.data" -- "$ruby" testdata/ruby/soak.rb "$secs" \
  >/dev/null 2>"$out/record.log" &
rec=$!
rss_log=$out/rss.tsv
echo -e "seconds\trecorder_rss_kib\ttarget_threads" > "$rss_log"
t=0
while kill -0 "$rec" 2>/dev/null; do
  sleep 10; t=$((t + 10))
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$rec/status" 2>/dev/null || true)
  [ -n "$rss" ] || break
  tgt=$(pgrep -P "$rec" | head -1 || true)
  thr=$( [ -n "$tgt" ] && awk '/^Threads/ {print $2}' "/proc/$tgt/status" 2>/dev/null || echo -)
  echo -e "$t\t$rss\t$thr" >> "$rss_log"
  if [ $((t % 60)) -eq 0 ]; then echo "soak: ${t}s recorder RSS ${rss} KiB"; fi
done
wait "$rec"
cat "$out/record.log"
lost=$(sed -n 's/.* samples, \([0-9]*\) lost,.*/\1/p' "$out/record.log" | tail -1)
bin/rubyperf report -i "$out/soak.data" -n 8 > "$out/report.txt"
head -12 "$out/report.txt"
# Every sample, read back by rubyperf and by perf (without unwinding: perf's DWARF
# unwinding of a million stack copies takes hours).
read -r samples unknown < <(bin/rubyperf script --ruby-only -i "$out/soak.data" |
  awk '/ruby-cpu:/ {n++} /\[unknown\]/ {u++} END {print n+0, u+0}')
perf_samples=$(perf script -F comm,tid,time -i "$out/soak.data" 2>"$out/perf-script.err" | wc -l)
summary=$(sed -n 's/^rubyperf: \([0-9]*\) samples,.*/\1/p' "$out/record.log" | tail -1)
awk -F'\t' 'NR==2 {first=$2} NR>1 {if ($2>max) max=$2; last=$2} NR==7 {warm=$2}
  END {printf "soak: recorder RSS first %d KiB, after 1 min %d KiB, max %d KiB, last %d KiB\n", first, warm, max, last}' "$rss_log"
echo "soak: $summary samples recorded, $lost lost; rubyperf script read $samples ($unknown unknown frames), perf script $perf_samples; files in $out"
[ "$lost" = 0 ] || { echo "soak: FAIL: $lost samples lost"; exit 1; }
[ "$samples" = "$summary" ] && [ "$perf_samples" = "$summary" ] || { echo "soak: FAIL: samples read back differ from the summary"; exit 1; }
[ -n "${SOAK_KEEP:-}" ] || rm -f "$out/soak.data" # tens of GB for 30 minutes
