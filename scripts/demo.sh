#!/usr/bin/env bash
# make demo: shows what rubyperf can do today on the bundled Rubies.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${RUBYPERF_CACHE:-$HOME/.cache/rubyperf}
out=demo-out
mkdir -p "$out"
bin=bin/rubyperf

echo "== rubyperf offsets: where each Ruby keeps its VM state =="
for flavor in 3.1.2-debian 3.1.2-shared 3.3.8-static 3.3.8-static-stripped; do
  vm=$(readlink -f "$cache/ruby/$flavor/vm")
  echo
  echo "-- $flavor"
  "$bin" offsets "$vm" | sed -n '1,/^structs/p' | grep -v '^structs' | grep -v '^$'
  "$bin" offsets --format json "$vm" > "$out/offsets-$flavor.json"
done

echo
echo "== rubyperf offsets -p: a live Debian ruby3.1 process =="
"$cache/ruby/3.1.2-debian/ruby" -e 'STDOUT.sync = true; puts :ready; sleep' > "$out/.ready" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q ready "$out/.ready" 2>/dev/null && break; sleep 0.1; done
"$bin" offsets -p "$pid" | sed -n '1,/^structs/p' | grep -v '^structs' | grep -v '^$'
rm -f "$out/.ready"

echo
echo "Full layouts (every struct member and constant) are in $out/offsets-*.json"
