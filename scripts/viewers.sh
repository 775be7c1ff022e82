#!/usr/bin/env bash
# Installs the web viewers the browser tests load recordings in (today: speedscope's
# web app, from the npm package that ships it) into $RUBYPERF_CACHE/npm, pinned by
# testdata/viewers/package-lock.json. Outside the checkout, so that a clone stays clean.
# Idempotent: npm runs only when the last finished install was of another lock (a new
# pin) or there was none.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUBYPERF_CACHE=${RUBYPERF_CACHE:-$HOME/.cache/rubyperf}
src=testdata/viewers
dir=$RUBYPERF_CACHE/npm
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9

# installed.json is a copy of the lock, written after npm ci succeeded: an install that
# was interrupted has none, and is redone, as is one whose app went missing.
app=$dir/node_modules/speedscope/dist/release/index.html # what the tests load
if cmp -s "$src/package-lock.json" "$dir/installed.json" && [ -f "$app" ]; then
  exit 0
fi
command -v npm >/dev/null || { echo "viewers: npm is not installed: install Node.js with npm (Debian: apt-get install npm)" >&2; exit 1; }
echo "viewers: installing speedscope into $dir/node_modules" >&2
rm -f "$dir/installed.json"
cp "$src/package.json" "$src/package-lock.json" "$dir/"
# --ignore-scripts: the app is static files; nothing in it needs to run to install.
(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
[ -f "$app" ] || { echo "viewers: npm ci did not install $app" >&2; exit 1; }
cp "$src/package-lock.json" "$dir/installed.json"
