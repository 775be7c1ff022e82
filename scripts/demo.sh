#!/usr/bin/env bash
# make demo: shows what rubyperf can do today on the bundled Rubies.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${RUBYPERF_CACHE:-$HOME/.cache/rubyperf}
out=demo-out
mkdir -p "$out"
bin=bin/rubyperf

root=$cache/ruby
field() { sed -n "s/^$2=//p" "$root/$1/manifest"; } # FLAVOR KEY
# newest PREFIX: the newest flavor of the matrix whose name starts with PREFIX.
newest() {
  local best="" n
  for n in $(grep "^$1" "$root/matrix"); do
    if [ -z "$best" ] || [ "$(printf '%s\n%s\n' "$(field "$best" version)" "$(field "$n" version)" | sort -V | tail -1)" != "$(field "$best" version)" ]; then
      best=$n
    fi
  done
  echo "$best"
}
debian31=$(newest debian-3.1)

echo "== rubyperf offsets: where each Ruby keeps its VM state =="
for flavor in $(cat "$root/matrix"); do
  vm=$(field "$flavor" vm)
  echo
  echo "-- $flavor (Ruby $(field "$flavor" version))"
  "$bin" offsets "$vm" 2>&1 | sed -n '1,/^structs/p' | grep -v '^structs' | grep -v '^$' || true
  "$bin" offsets --format json "$vm" > "$out/offsets-$flavor.json" 2>/dev/null || true
done

echo
# start_ruby FLAVOR ARGS..: runs a test Ruby in the background until it prints "ready".
start_ruby() {
  local flavor=$1; shift
  local ready; ready=$(mktemp)
  "$(field "$flavor" exe)" "$@" > "$ready" &
  pid=$!
  pids="${pids:-} $pid"
  for _ in $(seq 100); do grep -q ready "$ready" 2>/dev/null && break; sleep 0.1; done
  rm -f "$ready"
}
trap 'kill ${pids:-} 2>/dev/null || true' EXIT

echo
echo "== rubyperf offsets -p: a live Debian ruby3.1 process ($debian31) =="
start_ruby "$debian31" -e 'STDOUT.sync = true; puts :ready; sleep'
"$bin" offsets -p "$pid" | sed -n '1,/^structs/p' | grep -v '^structs' | grep -v '^$'

for flavor in $(cat "$root/matrix"); do
  echo
  echo "== rubyperf snapshot: the bundled workload (testdata/ruby/workload.rb) on $flavor =="
  start_ruby "$flavor" testdata/ruby/workload.rb
  sleep 0.5
  # A build rubyperf cannot read is refused in one line, never misread.
  "$bin" snapshot -p "$pid" || true
  "$bin" snapshot -p "$pid" --format json > "$out/snapshot-$flavor.json" 2>/dev/null || true
  kill "$pid" 2>/dev/null || true # spinning on, it would slow the recordings below
done

echo
echo "== rubyperf record: 5 s of the bundled workload on Debian's ruby3.1 ($debian31), at 99 Hz =="
"$bin" record -F 99 -o "$out/rubyperf.data" -- "$(field "$debian31" exe)" testdata/ruby/workload.rb 5 >/dev/null
echo
echo "-- stock perf script reads it (first sample):"
perf script -i "$out/rubyperf.data" -F comm,pid,tid,event,ip,sym,dso 2>/dev/null | awk 'NR>1 && /ruby-cpu:/{exit} {print}' || true
echo "-- stock perf report reads it:"
perf report --stdio --no-children -i "$out/rubyperf.data" 2>/dev/null | grep -E '^ +[0-9.]+%' | head -8 || true

echo
echo "== rubyperf report: Ruby methods, C methods, native functions =="
"$bin" report -i "$out/rubyperf.data" -n 8
echo
echo "== rubyperf script: the first sample, Ruby frames merged into the native stack =="
"$bin" script -i "$out/rubyperf.data" | awk 'NR>1 && /ruby-cpu:/{exit} {print}' || true
"$bin" script -i "$out/rubyperf.data" > "$out/rubyperf.script.txt"
"$bin" convert -i "$out/rubyperf.data" -f folded -o "$out/rubyperf.folded"
"$bin" convert -i "$out/rubyperf.data" -f pprof -o "$out/rubyperf.pb.gz"
"$bin" convert -i "$out/rubyperf.data" -f speedscope -o "$out/rubyperf.speedscope.json"
"$bin" convert -i "$out/rubyperf.data" -f svg -o "$out/rubyperf.svg"
"$bin" convert -i "$out/rubyperf.data" -f svg --native -o "$out/rubyperf-native.svg"

# jit_share FILE: how many samples start in JIT code (perf shows it in /tmp/perf-PID.map), and how
# many of those unwind through it to their thread's start (main, _start, start_thread, __clone3).
jit_share() {
  "$bin" script --native -i "$1" | awk 'BEGIN { RS = "" } { n++; split($0, l, "\n"); if (l[2] ~ /\/tmp\/perf-[0-9]+\.map\)$/) { j++; if ($0 ~ /\n[ \t]*[0-9a-f]+ (main|_start|start_thread|__clone3)\+0x[0-9a-f]+ \(/) m++ } }
    END { printf "%d of %d samples start in JIT code, %d of those unwind through it to their thread'"'"'s start\n", j, n, m }'
}
# The newest test Ruby with YJIT (the manifest says so) and its own symbols, so that native frames
# are named; Debian's 3.1 has YJIT but no symbols.
yjit_flavor=""
for f in $(cat "$root/matrix"); do
  [ "$(field "$f" yjit)" = 1 ] && [ "$(field "$f" symtab)" = 1 ] || continue
  if [ -z "$yjit_flavor" ] || [ "$(printf '%s\n%s\n' "$(field "$yjit_flavor" version)" "$(field "$f" version)" | sort -V | tail -1)" != "$(field "$yjit_flavor" version)" ]; then
    yjit_flavor=$f
  fi
done
[ -n "$yjit_flavor" ] || yjit_flavor=$debian31
echo
echo "== YJIT: the same workload with --yjit on $yjit_flavor (Ruby $(field "$yjit_flavor" version)), next to the interpreter =="
exe=$(field "$yjit_flavor" exe)
if "$exe" --yjit -e 'exit(RubyVM::YJIT.enabled? ? 0 : 1)' 2>/dev/null; then
  "$bin" record -F 99 -o "$out/rubyperf-interp.data" -- "$exe" testdata/ruby/workload.rb 5 >/dev/null
  "$bin" record -F 99 -o "$out/rubyperf-yjit.data" -- "$exe" --yjit testdata/ruby/workload.rb 5 >/dev/null
  echo "-- interpreter: $(jit_share "$out/rubyperf-interp.data")"
  echo "-- YJIT:        $(jit_share "$out/rubyperf-yjit.data")"
  echo
  "$bin" report -i "$out/rubyperf-yjit.data" -n 8
  echo
  echo "-- a sample in JIT code, merged (rubyperf script):"
  "$bin" script -i "$out/rubyperf-yjit.data" | awk 'BEGIN { RS = ""; ORS = "\n\n" } /\[JIT\] / { print; exit }' || true
  "$bin" convert -i "$out/rubyperf-yjit.data" -f svg -o "$out/rubyperf-yjit.svg"
else
  echo "($yjit_flavor has no YJIT)"
fi

# The newest test Ruby with DWARF (exact thread states) and headers (the label extension).
wall_flavor=""
for f in $(cat "$root/matrix"); do
  [ "$(field "$f" dwarf)" = 1 ] && [ "$(field "$f" kind)" = source ] || continue
  if [ -z "$wall_flavor" ] || [ "$(printf '%s\n%s\n' "$(field "$wall_flavor" version)" "$(field "$f" version)" | sort -V | tail -1)" != "$(field "$wall_flavor" version)" ]; then
    wall_flavor=$f
  fi
done
if [ -n "$wall_flavor" ]; then
  exe=$(field "$wall_flavor" exe)
  echo
  echo "== record --wall: threads that compute, allocate, sleep and wait for a pipe, on $wall_flavor (Ruby $(field "$wall_flavor" version)) =="
  "$bin" record --wall -F 99 -o "$out/rubyperf-wall.data" -- "$exe" testdata/ruby/states.rb mixed 3 >/dev/null
  "$bin" report -i "$out/rubyperf-wall.data" --threads -n 3 | awk '/^# thread/ {t=$0} /^## thread states/ {print t; p=1; next} p && /^$/ {p=0; print ""} p'
  "$bin" convert -i "$out/rubyperf-wall.data" -f svg --ruby-only -o "$out/rubyperf-wall.svg"

  echo
  echo "== request labels: requests on fibers labelled request_id and endpoint (the ruby-profiler gem's layout) =="
  so=$("$exe" -rrbconfig -e 'puts RbConfig::CONFIG["DLEXT"]')
  ext="$out/rubyperf_profiler_state.$so"
  c=$("$exe" -rrbconfig -e 'c = RbConfig::CONFIG; puts [c["CC"], c["CFLAGS"], "-I" + c["rubyarchhdrdir"], "-I" + c["rubyhdrdir"]].join(" ")')
  if $c -fPIC -shared -o "$ext" testdata/ruby/profiler_state_ext/rubyperf_profiler_state.c 2>/dev/null; then
    "$bin" record -F 499 -o "$out/rubyperf-labels.data" -- "$exe" testdata/ruby/labels.rb 3 "$ext" >/dev/null
    "$bin" convert -i "$out/rubyperf-labels.data" -f pprof -o "$out/rubyperf-labels.pb.gz"
    echo "-- time by endpoint label (convert -f folded --group-by endpoint):"
    "$bin" convert -i "$out/rubyperf-labels.data" -f folded --group-by endpoint |
      awk '{ n = split($1, f, ";"); w[f[2]] += $NF; all += $NF } END { for (k in w) printf "  %6.2f%%  %s\n", 100 * w[k] / all, k }' | sort -rn
    "$bin" convert -i "$out/rubyperf-labels.data" -f svg --group-by endpoint -o "$out/rubyperf-labels.svg"
  else
    echo "(no compiler or headers for $wall_flavor: skipped)"
  fi
fi

echo
echo "== rubyperf agent: OTLP profiles of every Ruby to a real OpenTelemetry Collector, for 8 s =="
# The tests' collector (testdata/collector: the Collector's own OTLP receiver,
# profiles enabled), built once into the cache; it listens on 127.0.0.1 only.
# Keyed by its source, as the tests' build is: a new clone reuses it.
col=$cache/otelcol/demo-$(cat testdata/collector/go.mod testdata/collector/go.sum testdata/collector/main.go | sha256sum | cut -c1-16)/otelcol-rubyperf
if [ ! -x "$col" ]; then
  echo "(building the collector from its Go modules, once: about a minute and a half)"
  mkdir -p "$(dirname "$col")"
  (cd testdata/collector && GOWORK=off go build -buildvcs=false -o "$col" .)
fi
grpc_port=$(shuf -i 20000-40000 -n 1); http_port=$((grpc_port + 1))
rm -f "$out/agent-profiles.otlp" "$out/agent-profiles.otlp.metadata"
cat > "$out/collector.yaml" <<YAML
receivers:
  otlp:
    protocols:
      grpc: {endpoint: "127.0.0.1:$grpc_port"}
      http: {endpoint: "127.0.0.1:$http_port"}
exporters:
  profilefile: {path: "$(cd "$out" && pwd)/agent-profiles.otlp"}
  debug: {verbosity: basic}
service:
  telemetry: {metrics: {level: none}}
  pipelines:
    profiles: {receivers: [otlp], exporters: [profilefile, debug]}
YAML
"$col" --config "$out/collector.yaml" --feature-gates=service.profilesSupport > "$out/collector.log" 2>&1 &
pids="${pids:-} $!"
for _ in $(seq 100); do grep -q 'Everything is ready' "$out/collector.log" && break; sleep 0.1; done
grep -q 'Everything is ready' "$out/collector.log" || { echo "the collector did not start: see $out/collector.log"; exit 1; }
# The agent samples every Ruby; --match keeps it to the demo's own.
cp testdata/ruby/shares.rb "$out/agent-demo.rb"
start_ruby "$debian31" "$out/agent-demo.rb" 8
"$bin" agent --endpoint "127.0.0.1:$grpc_port" --insecure --interval 2s --match 'agent-demo\.rb' \
  --label demo=true 2> "$out/agent.log" &
agent=$!
sleep 8
kill -TERM "$agent"; wait "$agent" || true
sed 's/^/  /' "$out/agent.log"
echo "-- what the collector logged as it received them:"
grep -o '"resource profiles": [0-9]*, "sample records": [0-9]*' "$out/collector.log" | sed 's/^/  /'

echo
echo "Outputs in $out/:"
echo "  rubyperf.data            the recording (stock perf script/report open it)"
echo "  rubyperf.script.txt      perf-script text with Ruby frames (flame graph scripts read it)"
echo "  rubyperf.folded          folded stacks"
echo "  rubyperf.pb.gz           pprof: go tool pprof -top $out/rubyperf.pb.gz"
echo "  rubyperf.speedscope.json speedscope"
echo "  rubyperf.svg             an interactive flame graph: open it in a browser (the default view)"
echo "  rubyperf-native.svg      the same with every native frame (--native)"
echo "  rubyperf-yjit.data, rubyperf-yjit.svg  the same workload under YJIT (rubyperf-interp.data: without)"
echo "  rubyperf-wall.data, rubyperf-wall.svg  wall-clock time (record --wall): blocked, GVL and GC time too"
echo "  rubyperf-labels.data, rubyperf-labels.pb.gz, rubyperf-labels.svg  request labels (go tool pprof -tags)"
echo "  offsets-*.json, snapshot-*.json"
echo "  agent.log, collector.log, agent-profiles.otlp  rubyperf agent's lines, the collector's, and what it received"
