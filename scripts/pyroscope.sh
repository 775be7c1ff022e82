#!/usr/bin/env bash
# make pyroscope SRC=DIR: builds Grafana Pyroscope (the single binary) from a
# copy of its repository into $RUBYPERF_CACHE/pyroscope/COMMIT/pyroscope, for
# the tests built with -tags pyroscope (make test-pyroscope). The Go module
# proxy does not serve Pyroscope's modules, so this cannot run in CI: get
# the source on a machine that reaches GitHub (git clone
# https://github.com/grafana/pyroscope); tested at 3fe6a457a320 (2026-08-21).
#
# The source is built in a copy: its go.mod pins a github.com/grafana/dskit
# pseudo-version the proxy refuses, replaced here by one it serves
# ($DSKIT), with -mod=mod. About 7 minutes on 2 cores with a warm module
# cache, 25 cold; 140 MB.
set -euo pipefail
src=${1:-${SRC:-}}
if [ -z "$src" ] || [ ! -f "$src/go.mod" ] || [ ! -d "$src/cmd/pyroscope" ]; then
  echo "usage: scripts/pyroscope.sh DIR (a copy of github.com/grafana/pyroscope: DIR/cmd/pyroscope)" >&2
  exit 2
fi
commit=${COMMIT:-$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null || true)}
if [ -z "$commit" ]; then
  echo "pyroscope: $src is not a git work tree: say which commit it is with COMMIT=..." >&2
  exit 2
fi
DSKIT=${DSKIT:-v0.0.0-20260703122047-de1ec7541c44}
out=${RUBYPERF_CACHE:-$HOME/.cache/rubyperf}/pyroscope/$commit
if [ -x "$out/pyroscope" ]; then
  echo "pyroscope: $out/pyroscope is built"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "pyroscope: building $commit from $src in $work"
cp -a "$src/." "$work/"
cd "$work"
go mod edit -replace "github.com/grafana/dskit=github.com/grafana/dskit@$DSKIT"
mkdir -p "$out"
start=$(date +%s)
GOFLAGS=-mod=mod go build -buildvcs=false -o "$out/pyroscope.tmp" ./cmd/pyroscope
mv "$out/pyroscope.tmp" "$out/pyroscope"
echo "pyroscope: built $out/pyroscope in $(( $(date +%s) - start ))s"
