#!/usr/bin/env bash
# Builds the Rubies rubyperf is tested against, from Debian's source packages, into
# $RUBYPERF_CACHE (default $HOME/.cache/rubyperf) so the second run is instant.
#
#   ruby/3.1.2-debian          Debian's ruby3.1 package (stripped libruby: .dynsym + .gnu_debuglink)
#   ruby/3.1.2-shared          bookworm's ruby3.1 source, --enable-shared (libruby with compressed DWARF)
#   ruby/3.3.8-static          trixie's ruby3.3 source, --disable-shared (static ruby, uncompressed DWARF,
#                              the TLS block in the executable)
#   ruby/3.3.8-static-stripped strip --strip-all of that executable (.dynsym only: a distro 3.3+)
#
# Each finished flavor has "ruby" (the executable to run), "vm" (the ELF file holding the VM:
# libruby or the executable) and "ok" (written last).
set -euo pipefail

cache=${RUBYPERF_CACHE:-$HOME/.cache/rubyperf}
root=$cache/ruby
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9

jobs=$(nproc 2>/dev/null || echo 2)
log() { echo "test-rubies: $*" >&2; }

ensure_deb_src() {
  # apt-get source needs deb-src entries for bookworm (3.1.2) and trixie (3.3.8).
  local f=/etc/apt/sources.list.d/rubyperf-src.sources
  if ! grep -rqs 'deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/ ||
     ! grep -rqs 'trixie' /etc/apt/sources.list.d/ ; then
    [ "$(id -u)" -eq 0 ] || { log "need root to add deb-src entries to apt (or add them for bookworm and trixie)"; exit 1; }
    cat >"$f" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -qq
  fi
}

# build SRCPKG UPSTREAM_VERSION NAME CONFIGURE_ARGS...
build() {
  local srcpkg=$1 version=$2 name=$3; shift 3
  local dest=$root/$name
  [ -f "$dest/ok" ] && return 0
  ensure_deb_src
  local work=$cache/build/$name
  rm -rf "$work" "$dest"; mkdir -p "$work"
  log "$name: fetching Debian source package $srcpkg"
  (cd "$work" && apt-get source -qq --download-only "$srcpkg" >/dev/null 2>&1) ||
    { log "$name: apt-get source $srcpkg failed (is a deb-src entry reachable?)"; exit 1; }
  local dsc; dsc=$(ls "$work"/"$srcpkg"_"$version"-*.dsc 2>/dev/null | head -1)
  [ -n "$dsc" ] || { log "$name: $srcpkg source is not upstream $version: $(ls "$work")"; exit 1; }
  (cd "$work" && dpkg-source --no-check -x "$dsc" src >/dev/null)
  # Debian's patches touch configure.ac: regenerate configure so it matches.
  (cd "$work/src" && autoconf)
  log "$name: configure $*"
  (cd "$work/src" && ./configure --prefix="$dest" --disable-install-doc --disable-install-rdoc \
      --disable-yjit "$@" >"$work/configure.log" 2>&1) || { tail -20 "$work/configure.log" >&2; exit 1; }
  log "$name: make -j$jobs (a few minutes)"
  (cd "$work/src" && make -j"$jobs" >"$work/make.log" 2>&1) || { tail -30 "$work/make.log" >&2; exit 1; }
  # HAVE_BASERUBY=no: with a system ruby present, install would try to download bundled gems.
  (cd "$work/src" && make install-nodoc HAVE_BASERUBY=no >"$work/install.log" 2>&1) || { tail -30 "$work/install.log" >&2; exit 1; }
  ln -sf bin/ruby "$dest/ruby"
  rm -rf "$work"
}

finish() { # NAME: verify the ruby runs, then mark the flavor done
  local dest=$root/$1
  "$dest/ruby" -e 'require "fiddle"; exit(RUBY_VERSION == ARGV[0] ? 0 : 1)' "$2" ||
    { log "$1: $dest/ruby does not run as Ruby $2 with Fiddle"; exit 1; }
  touch "$dest/ok"
}

# Debian's own package (installed by scripts/deps.sh).
if [ ! -f "$root/3.1.2-debian/ok" ]; then
  mkdir -p "$root/3.1.2-debian"
  ln -sf /usr/bin/ruby3.1 "$root/3.1.2-debian/ruby"
  finish 3.1.2-debian 3.1.2
fi

if [ ! -f "$root/3.1.2-shared/ok" ]; then
  build ruby3.1 3.1.2 3.1.2-shared --enable-shared
  finish 3.1.2-shared 3.1.2
fi

if [ ! -f "$root/3.3.8-static/ok" ]; then
  build ruby3.3 3.3.8 3.3.8-static --disable-shared
  # Ruby's configure links with --compress-debug-sections; this flavor is the uncompressed one.
  objcopy --decompress-debug-sections "$root/3.3.8-static/bin/ruby"
  finish 3.3.8-static 3.3.8
fi

if [ ! -f "$root/3.3.8-static-stripped/ok" ]; then
  d=$root/3.3.8-static-stripped; rm -rf "$d"; mkdir -p "$d"
  # Same prefix-based load path as the unstripped build, so the copy runs from here.
  strip --strip-all -o "$d/ruby" "$root/3.3.8-static/bin/ruby"
  finish 3.3.8-static-stripped 3.3.8
fi

# "vm": the ELF file that holds each flavor's VM (refreshed every run; cheap).
ln -sfn "$(readlink -f /usr/lib/"$(gcc -print-multiarch)"/libruby-3.1.so.3.1)" "$root/3.1.2-debian/vm"
ln -sfn lib/libruby.so.3.1.2 "$root/3.1.2-shared/vm"
ln -sfn bin/ruby "$root/3.3.8-static/vm"
ln -sfn ruby "$root/3.3.8-static-stripped/vm"

log "ready in $root: $(cd "$root" && ls -d */ | tr -d / | tr '\n' ' ')"
