#!/usr/bin/env bash
# Builds Rubies that have no Debian package from a local copy of Ruby's git repository (a bare git
# directory: a mirror of github.com/ruby/ruby or a fork carrying its tags and release commits), into
# $RUBYPERF_CACHE (default $HOME/.cache/rubyperf). Run by hand; CI never runs it (it cannot fetch). The
# committed replay fixtures under rubystack/testdata/replay come from these builds.
#
#   scripts/mirror-rubies.sh /path/to/ruby.git            # every mirror flavor below
#   scripts/mirror-rubies.sh /path/to/ruby.git 4.0        # only mirror-4.0-shared
#
#   ruby/mirror-3.2-shared   v3_2_11, --enable-shared (libruby.so.3.2.11 with DWARF)
#   ruby/mirror-3.4-shared   v3_4_9,  --enable-shared (libruby.so.3.4.9 with DWARF)
#   ruby/mirror-4.0-shared   v4.0.5,  --enable-shared (libruby.so.4.0.5 with DWARF)
#   ruby/mirror-X-shared-stripped   strip --strip-all of that libruby, run in its place
#
# With a rustc (on PATH or in ~/.cargo/bin) each is built --enable-yjit, as ruby-build and the
# official images build them when Rust is present; RUBYPERF_MIRROR_YJIT=0 builds without.
#
# Each finished flavor has a "manifest" (key=value lines: version, exe, vm, dwarf, symtab, kind, local=1
# meaning built from a mirror and absent in CI) and "ok", written last. Bundled gems (Fiddle from 4.0 on)
# are not installed: the build is offline, and the tests' oracle uses testdata/ruby/oracle_ext instead.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 RUBY_GIT_DIR [3.2|3.4|4.0]..." >&2; exit 2; }
mirror=$1; shift
git --git-dir="$mirror" rev-parse --git-dir >/dev/null 2>&1 || { echo "mirror-rubies: $mirror: not a git directory" >&2; exit 1; }

cache=${RUBYPERF_CACHE:-$HOME/.cache/rubyperf}
root=$cache/ruby
mkdir -p "$root"
baseruby=${BASERUBY:-$(command -v ruby3.1 || command -v ruby || true)}
[ -n "$baseruby" ] || { echo "mirror-rubies: need a Ruby to build Ruby (BASERUBY)" >&2; exit 1; }
log() { echo "mirror-rubies: $*" >&2; }
# shellcheck source=stripped-libruby.sh
source "$(dirname "${BASH_SOURCE[0]}")/stripped-libruby.sh"
# shellcheck source=ruby-jit.sh
source "$(dirname "${BASH_SOURCE[0]}")/ruby-jit.sh"
rustc=$(rustc_path)
jit=(--disable-yjit)
if [ "${RUBYPERF_MIRROR_YJIT:-1}" = 1 ] && [ -n "$rustc" ]; then jit=(--enable-yjit "RUSTC=$rustc"); fi

# resolve REF: a tag, or a release commit found by its subject ("v4.0.5").
resolve() {
  local ref=$1
  if git --git-dir="$mirror" rev-parse -q --verify "$ref^{commit}" >/dev/null; then
    git --git-dir="$mirror" rev-parse "$ref^{commit}"; return
  fi
  local c
  c=$(git --git-dir="$mirror" log --all -E --grep="^${ref//./\\.}\$" --format=%H -n 1)
  [ -n "$c" ] || { log "$ref: no such tag or release commit in $mirror"; return 1; }
  echo "$c"
}

# build_mirror_flavor NAME REF VERSION LIBNAME: one --enable-shared build of REF into ruby/NAME.
build_mirror_flavor() {
  local name=$1 ref=$2 version=$3 lib=$4
  local dest=$root/$name work=$cache/build/$name
  if [ -f "$dest/ok" ]; then log "$name: present"; return 0; fi
  local commit; commit=$(resolve "$ref")
  rm -rf "$work" "$dest"; mkdir -p "$work/src"
  log "$name: $ref ($commit) from $mirror"
  git --git-dir="$mirror" archive "$commit" | tar -x -C "$work/src"
  (cd "$work/src" && ./autogen.sh >"$work/autogen.log" 2>&1) || { tail -20 "$work/autogen.log" >&2; return 1; }
  (cd "$work/src" && ./configure --prefix="$dest" --enable-shared --disable-install-doc "${jit[@]}" \
      --with-baseruby="$baseruby" >"$work/configure.log" 2>&1) || { tail -20 "$work/configure.log" >&2; return 1; }
  log "$name: make (several minutes)"
  (cd "$work/src" && nice -n 10 make -j"$(nproc 2>/dev/null || echo 2)" main >"$work/make.log" 2>&1) ||
    { tail -30 "$work/make.log" >&2; return 1; }
  # HAVE_BASERUBY=no: install would otherwise try to download the bundled gems.
  (cd "$work/src" && nice -n 10 make install-nodoc HAVE_BASERUBY=no >"$work/install.log" 2>&1) ||
    { tail -30 "$work/install.log" >&2; return 1; }
  local got; got=$("$dest/bin/ruby" -e 'print RUBY_VERSION')
  [ "$got" = "$version" ] || { log "$name: built Ruby says $got, want $version"; return 1; }
  [ -f "$dest/lib/$lib" ] || { log "$name: $dest/lib/$lib missing"; return 1; }
  local dwarf=0 symtab=0
  readelf -S "$dest/lib/$lib" | grep -q '\.debug_info' && dwarf=1
  readelf -S "$dest/lib/$lib" | grep -q '\.symtab' && symtab=1
  cat >"$dest/manifest.tmp" <<MANIFEST
version=$version
exe=$dest/bin/ruby
vm=$dest/lib/$lib
dwarf=$dwarf
symtab=$symtab
kind=source
local=1
commit=$commit
yjit=$(yjit_of "$dest/bin/ruby")
MANIFEST
  mv "$dest/manifest.tmp" "$dest/manifest"
  touch "$dest/ok" # written last, as scripts/test-rubies.sh does
  rm -rf "$work"
  log "$name: ready"
}

# stripped NAME: ruby/NAME-stripped, the build's ruby running a strip --strip-all copy of its
# libruby (the library search path comes before the executable's RUNPATH): a distro-shaped
# libruby whose layout must come from a table and whose anchors from disassembly.
stripped() {
  local src=$root/$1 d=$root/$1-stripped
  if [ -f "$d/ok" ]; then log "$1-stripped: present"; return 0; fi
  local vm; vm=$(sed -n 's/^vm=//p' "$src/manifest")
  local version; version=$(sed -n 's/^version=//p' "$src/manifest")
  local so; so=$(basename "$vm")
  rm -rf "$d"; mkdir -p "$d"
  stripped_libruby "$vm" "$src/bin/ruby" "$d"
  cat >"$d/manifest" <<MANIFEST
version=$version
exe=$d/ruby
vm=$d/$so
dwarf=0
symtab=0
kind=source
local=1
yjit=$(yjit_of "$d/ruby")
MANIFEST
  local got; got=$("$d/ruby" -e 'print RUBY_VERSION')
  [ "$got" = "$version" ] || { log "$1-stripped: runs as '$got', want $version"; return 1; }
  touch "$d/ok"
  log "$1-stripped: ready"
}

want=("$@"); [ ${#want[@]} -gt 0 ] || want=(3.2 3.4 4.0)
for w in "${want[@]}"; do
  case $w in
    3.2) build_mirror_flavor mirror-3.2-shared v3_2_11 3.2.11 libruby.so.3.2.11 ;;
    3.4) build_mirror_flavor mirror-3.4-shared v3_4_9 3.4.9 libruby.so.3.4.9 ;;
    4.0) build_mirror_flavor mirror-4.0-shared v4.0.5 4.0.5 libruby.so.4.0.5 ;;
    *) log "unknown flavor $w (3.2, 3.4 or 4.0)"; exit 2 ;;
  esac
  stripped "mirror-$w-shared"
done
