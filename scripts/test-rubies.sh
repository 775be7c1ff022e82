#!/usr/bin/env bash
# Sets up the Rubies rubyperf is tested against in $RUBYPERF_CACHE/ruby (default
# $HOME/.cache/rubyperf/ruby), from what Debian's archive serves today: nothing
# here names a patch version, because the archive replaces them.
#
#   debian-MINOR-SUITE     Debian's binary package as that suite ships it (stripped),
#                          unpacked privately with its own libraries; suites newer than
#                          this machine's run through their own dynamic loader
#   source-3.1-shared      the newest served 3.1 source, --enable-shared (compressed DWARF)
#   source-3.3-static      the newest served 3.3 source, --disable-shared (uncompressed DWARF,
#                          the TLS block in the executable), with YJIT
#   source-3.3-static-stripped   strip --strip-all of it (.dynsym only: a distro 3.3+)
#   source-3.3-shifted-stripped  3.3 built with -DVM_DEBUG_BP_CHECK=1 (a control frame 8 bytes
#                          longer than any table says), stripped: must be refused, not misread
#   source-3.4-shared      the newest served 3.4 source, --enable-shared, with YJIT
#   source-3.3-musl        3.3 against musl libc (musl-gcc), --enable-shared: an Alpine-shaped Ruby
#   source-3.3-musl-stripped     its libruby stripped, as Alpine ships it
#   source-3.3-musl-dbg    source-3.3-musl run through a stripped musl whose unwind tables
#                          are in its separate debug file (Alpine's musl with musl-dbg)
#
# YJIT is Rust: the flavors marked "with YJIT" are built --enable-yjit with the
# machine's rustc (on PATH or in ~/.cargo/bin), the others --disable-yjit as Debian
# builds 3.3 and 3.4. Without rustc they are built without it (a failure under CI=true,
# so the matrix never shrinks unnoticed).
#
# Each finished flavor directory has "manifest" (key=value lines: name, version, kind,
# suite, exe, vm, dwarf, symtab, local, yjit), "ruby" (what to run) and "ok" (written last).
# "matrix" lists the flavors of this run; internal/testruby reads both. Flavors built by
# hand from a copy of Ruby's repository (scripts/mirror-rubies.sh) have local=1.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUBYPERF_CACHE=${RUBYPERF_CACHE:-$HOME/.cache/rubyperf}
root=$RUBYPERF_CACHE/ruby
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9
# shellcheck source=stripped-libruby.sh
. scripts/stripped-libruby.sh
# shellcheck source=debian-archive.sh
. scripts/debian-archive.sh
# shellcheck source=ruby-jit.sh
. scripts/ruby-jit.sh

jobs=$(nproc 2>/dev/null || echo 2)
arch=$(dpkg --print-architecture)
multiarch=$(gcc -print-multiarch)
log() { echo "test-rubies: $*" >&2; }
die() { log "$*"; exit 1; }
matrix=()

# YJIT: the configure flags of the flavors built with it, and want_yjit[NAME]=1|0 for
# the flavors whose YJIT is decided here.
rustc=$(rustc_path)
if [ -n "$rustc" ]; then
  yjit_flags=(--enable-yjit "RUSTC=$rustc")
  yjit_on=1
else
  [ "${CI:-}" = true ] && { echo "test-rubies: no rustc on PATH or in ~/.cargo/bin: the YJIT flavors need it" >&2; exit 1; }
  echo "test-rubies: no rustc: source-3.3-static and source-3.4-shared are built without YJIT" >&2
  yjit_flags=(--disable-yjit)
  yjit_on=0
fi
declare -A want_yjit=([source-3.3-static]=$yjit_on [source-3.3-static-stripped]=$yjit_on
  [source-3.3-shifted-stripped]=0 [source-3.3-cet-stripped]=0 [source-3.4-shared]=$yjit_on)

# current NAME VERSION: the flavor is built, of this version, with or without YJIT as wanted.
current() {
  [ -f "$root/$1/ok" ] && grep -qx "version=$2" "$root/$1/manifest" 2>/dev/null || return 1
  local want=${want_yjit[$1]:-} m=$root/$1/manifest
  # A manifest from before this line was written means a build without YJIT.
  [ -z "$want" ] || grep -qx "yjit=$want" "$m" || { [ "$want" = 0 ] && ! grep -q '^yjit=' "$m"; }
}

# finish NAME VERSION KIND SUITE EXE VM DWARF SYMTAB: check that it runs as that Ruby, record it.
finish() {
  local d=$root/$1
  cat >"$d/manifest" <<EOF
name=$1
version=$2
kind=$3
suite=$4
exe=$5
vm=$6
dwarf=$7
symtab=$8
local=0
EOF
  local got
  got=$("$d/ruby" -e 'begin; require "fiddle"; rescue LoadError; end; print RUBY_VERSION' 2>&1) ||
    die "$1: $d/ruby does not run: $got"
  [ "$got" = "$2" ] || die "$1: $d/ruby reports Ruby '$got', expected $2"
  # Whether it has YJIT, asked of the Ruby itself (Debian's 3.1 has; 3.3 and 3.4 have not).
  local yjit; yjit=$(yjit_of "$d/ruby")
  [ -z "${want_yjit[$1]:-}" ] || [ "${want_yjit[$1]}" = $yjit ] || die "$1: yjit=$yjit, wanted ${want_yjit[$1]}"
  echo "yjit=$yjit" >>"$d/manifest"
  touch "$d/ok"
}

upstream() { debian_upstream "$1"; }

# deps_of DEB: the shared-library packages it depends on (first alternative of each).
deps_of() {
  dpkg-deb -f "$1" Depends Pre-Depends 2>/dev/null | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/:any//; s/ //g' |
    grep -E '^lib' | grep -vE '^libruby' || true
}

# debian_headers NAME MINOR VERSION: unpack ruby$MINOR-dev into a Debian Ruby cached
# before its headers were (the tests build C extensions against them).
debian_headers() {
  local d=$root/$1
  ls "$d"/root/usr/include/ruby-*/ruby.h >/dev/null 2>&1 && return 0
  log "$1: unpacking ruby$2-dev $3 (its headers)"
  rm -rf "$d/dev"
  if debian_fetch_binary "ruby$2-dev=$3" "$d/dev"; then
    for deb in "$d"/dev/*.deb; do dpkg-deb -x "$deb" "$d/root"; done
  else
    log "$1: no ruby$2-dev $3: no headers"
  fi
  rm -rf "$d/dev"
}

# debian_binary MINOR SUITE VERSION: unpack ruby$MINOR and libruby$MINOR of that suite,
# with the libraries they need from the same suite when it is not this machine's.
debian_binary() {
  local minor=$1 suite=$2 version=$3 name=debian-$1-$2
  matrix+=("$name")
  local up; up=$(upstream "$version")
  if current "$name" "$up"; then
    debian_headers "$name" "$minor" "$version"
    return 0
  fi
  log "$name: unpacking Debian's ruby$minor $version"
  local d=$root/$name; rm -rf "$d"; mkdir -p "$d/debs" "$d/root"
  debian_fetch_binary "ruby$minor=$version" "$d/debs"
  debian_fetch_binary "libruby$minor=$version" "$d/debs"
  # Its headers, for the tests' C extensions (the allocation oracle).
  debian_fetch_binary "ruby$minor-dev=$version" "$d/debs" || log "$name: no ruby$minor-dev $version: no headers"
  local own; own=$(. /etc/os-release && echo "$VERSION_CODENAME")
  local foreign=0
  case $suite in "$own" | "$own"-*) ;; *) foreign=1 ;; esac
  if [ $foreign = 1 ]; then
    # Its libraries, from its suite (experimental builds against unstable: take the newest).
    local libsuite=${suite%-security} todo seen="" p deb round
    todo="libc6 $(for deb in "$d"/debs/*.deb; do deps_of "$deb"; done)"
    for round in 1 2 3 4; do
      local next=""
      for p in $todo; do
        case " $seen " in *" $p "*) continue ;; esac
        seen="$seen $p"
        if [ "$libsuite" = experimental ]; then
          debian_fetch_binary "$p" "$d/debs" || die "$name: cannot fetch $p"
        else
          debian_fetch_binary "$p/$libsuite" "$d/debs" || die "$name: cannot fetch $p from $libsuite"
        fi
        for deb in "$d"/debs/"${p}"_*.deb; do next="$next $(deps_of "$deb")"; done
      done
      todo=$next
      [ -n "${todo// /}" ] || break
    done
  fi
  for deb in "$d"/debs/*.deb; do dpkg-deb -x "$deb" "$d/root"; done
  rm -rf "$d/debs"
  local r=$d/root
  local libs=$r/usr/lib/$multiarch:$r/lib/$multiarch
  local api; api=$(ls -d "$r"/usr/lib/ruby/[0-9]*.0 | head -1)
  # Debian's load path (ruby -e 'puts $:'), moved under the private root.
  local v=${api##*/} rubylib=""
  for dir in "$r/usr/lib/ruby/vendor_ruby/$v" "$r/usr/lib/$multiarch/ruby/vendor_ruby/$v" "$r/usr/lib/ruby/vendor_ruby" \
             "$api" "$api/$multiarch" "$r/usr/lib/$multiarch/ruby/$v"; do
    [ -d "$dir" ] && rubylib=${rubylib:+$rubylib:}$dir
  done
  {
    echo '#!/bin/bash'
    echo "# Debian's ruby$minor $version from $suite, unpacked privately by scripts/test-rubies.sh."
    echo "RUBYLIB=$rubylib\${RUBYLIB:+:\$RUBYLIB}; export RUBYLIB"
    if [ $foreign = 1 ]; then
      # Its glibc is newer than this machine's: run it through its own loader.
      local ld; ld=$(ls "$r"/usr/lib/"$multiarch"/ld-linux*.so.* "$r"/lib64/ld-linux*.so.* 2>/dev/null | head -1 || true)
      [ -n "$ld" ] || die "$name: no dynamic loader in its libc6"
      echo "exec $ld --library-path $libs --argv0 ruby$minor $r/usr/bin/ruby$minor \"\$@\""
    else
      echo "LD_LIBRARY_PATH=$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}; export LD_LIBRARY_PATH"
      echo "exec -a ruby$minor $r/usr/bin/ruby$minor \"\$@\""
    fi
  } >"$d/ruby"
  chmod +x "$d/ruby"
  local vm; vm=$(ls "$r"/usr/lib/"$multiarch"/libruby-"$minor".so."$minor"* | sort | tail -1)
  finish "$name" "$up" debian "$suite" "$d/ruby" "$(readlink -f "$vm")" 0 0
}

# fetchable_source NAME SRCPKG: the newest version of the source package that flavor
# NAME already is, or that can be downloaded (into $srcdir). Some suites publish
# source indexes whose files their pool does not serve: newest first, then older.
fetchable_source() {
  local v
  for v in $(debian_cache showsrc "$2" 2>/dev/null | awk '/^Version:/ {print $2}' | sort -V -r -u); do
    if current "$1" "$(upstream "$v")"; then
      echo "$v"
      return 0
    fi
    rm -rf "$srcdir"; mkdir -p "$srcdir"
    if debian_fetch_source "$2=$v" "$srcdir" 2>/dev/null; then
      echo "$v"
      return 0
    fi
    log "$2 $v: its source is listed but cannot be downloaded; trying an older one"
  done
  return 1
}

# source_build NAME SRCPKG VERSION CONFIGURE_ARGS..: build that source (unpacked in
# $srcdir/src by fetchable_source, or fetched now).
source_build() {
  local name=$1 srcpkg=$2 version=$3; shift 3
  local dest=$root/$name
  local work=$RUBYPERF_CACHE/build/$name
  rm -rf "$work" "$dest"; mkdir -p "$work"
  [ -d "$srcdir/src" ] || debian_fetch_source "$srcpkg=$version" "$srcdir"
  cp -a "$srcdir/src" "$work/src"
  # Debian's patches touch configure.ac: regenerate configure so it matches.
  (cd "$work/src" && autoconf)
  log "$name: configure $*"
  local jit=(--disable-yjit)
  [ "${want_yjit[$name]:-0}" = 1 ] && jit=("${yjit_flags[@]}")
  (cd "$work/src" && ./configure --prefix="$dest" --disable-install-doc --disable-install-rdoc \
      "${jit[@]}" "$@" >"$work/configure.log" 2>&1) || { tail -20 "$work/configure.log" >&2; exit 1; }
  log "$name: make -j$jobs (a few minutes)"
  (cd "$work/src" && make -j"$jobs" >"$work/make.log" 2>&1) || { tail -30 "$work/make.log" >&2; exit 1; }
  # HAVE_BASERUBY=no: with a system ruby present, install would try to download bundled gems.
  (cd "$work/src" && make install-nodoc HAVE_BASERUBY=no >"$work/install.log" 2>&1) || { tail -30 "$work/install.log" >&2; exit 1; }
  ln -sf bin/ruby "$dest/ruby"
  rm -rf "$work"
}


debian_archive_init

# Every Debian binary Ruby of the lines we support, in every suite that serves one.
for minor in 3.1 3.2 3.3 3.4 4.0; do
  while read -r suite version; do
    [ -n "$suite" ] && debian_binary "$minor" "$suite" "$version"
  done < <(debian_versions "ruby$minor")
done

srcdir=$RUBYPERF_CACHE/build/source
# source_flavor NAME MINOR: is the flavor built from the newest fetchable ruby$MINOR
# source? Sets $v to that Debian version.
source_flavor() {
  rm -rf "$srcdir"
  v=$(fetchable_source "$1" "ruby$2") || return 2
  current "$1" "$(upstream "$v")"
}

if source_flavor source-3.1-shared 3.1; then :; else
  [ $? = 2 ] && die "no ruby3.1 source package can be downloaded; check $apt_root/sources.list"
  source_build source-3.1-shared ruby3.1 "$v" --enable-shared
  so=$(cd "$root/source-3.1-shared/lib" && ls libruby.so.3.1.* | head -1)
  finish source-3.1-shared "$(upstream "$v")" source "" "$root/source-3.1-shared/ruby" \
    "$root/source-3.1-shared/lib/$so" 1 1
fi
matrix+=(source-3.1-shared)

if source_flavor source-3.3-static 3.3; then :; else
  [ $? = 2 ] && die "no ruby3.3 source package can be downloaded; check $apt_root/sources.list"
  source_build source-3.3-static ruby3.3 "$v" --disable-shared
  # Ruby's configure links with --compress-debug-sections; this flavor is the uncompressed one.
  objcopy --decompress-debug-sections "$root/source-3.3-static/bin/ruby"
  finish source-3.3-static "$(upstream "$v")" source "" "$root/source-3.3-static/ruby" \
    "$root/source-3.3-static/bin/ruby" 1 1
fi
v33=$(upstream "$v")
if ! current source-3.3-static-stripped "$v33"; then
  d=$root/source-3.3-static-stripped; rm -rf "$d"; mkdir -p "$d"
  # Same prefix-based load path as the unstripped build, so the copy runs from here.
  strip --strip-all -o "$d/ruby" "$root/source-3.3-static/bin/ruby"
  finish source-3.3-static-stripped "$v33" source "" "$d/ruby" "$d/ruby" 0 0
fi
# It loads its extensions from source-3.3-shifted: a build cut short there means this one too.
if ! current source-3.3-shifted-stripped "$v33" || [ ! -d "$root/source-3.3-shifted/lib" ]; then
  # A configure flag that adds a member to rb_control_frame_t: no table can know it.
  source_build source-3.3-shifted ruby3.3 "$v" --disable-shared cppflags=-DVM_DEBUG_BP_CHECK=1
  d=$root/source-3.3-shifted-stripped; rm -rf "$d"; mkdir -p "$d"
  strip --strip-all -o "$d/ruby" "$root/source-3.3-shifted/bin/ruby"
  # It loads its extensions from the build's prefix; keep those, drop the rest.
  rm -rf "$root/source-3.3-shifted/bin/ruby" "$root/source-3.3-shifted/share"
  finish source-3.3-shifted-stripped "$v33" source "" "$d/ruby" "$d/ruby" 0 0
  echo "expect=refused" >>"$d/manifest"
fi
matrix+=(source-3.3-static source-3.3-static-stripped source-3.3-shifted-stripped)

# The same source built as Debian builds it (its rbconfig's flags: CET's endbr64 in every
# function, -O2, a shared libruby), with a .symtab: the oracle for the disassembly
# fallbacks, which then run on its stripped copy.
if ! current source-3.3-cet-stripped "$v33"; then
  source_build source-3.3-cet ruby3.3 "$v" --enable-shared \
    CFLAGS='-g -O2 -Werror=implicit-function-declaration -fstack-protector-strong -fstack-clash-protection -Wformat -Werror=format-security -fcf-protection' \
    CPPFLAGS='-Wdate-time -D_FORTIFY_SOURCE=2' LDFLAGS='-Wl,-z,relro -Wl,-z,now'
  so=$(cd "$root/source-3.3-cet/lib" && ls libruby.so.3.3.* | head -1)
  finish source-3.3-cet "$v33" source "" "$root/source-3.3-cet/ruby" "$root/source-3.3-cet/lib/$so" 1 1
  d=$root/source-3.3-cet-stripped; rm -rf "$d"; mkdir -p "$d"
  stripped_libruby "$root/source-3.3-cet/lib/$so" "$root/source-3.3-cet/bin/ruby" "$d"
  finish source-3.3-cet-stripped "$v33" source "" "$d/ruby" "$d/$so" 0 0
fi
matrix+=(source-3.3-cet source-3.3-cet-stripped)

# The same source against musl libc, as Alpine's ruby images are (musl-gcc, Debian's
# musl-tools): a shared libruby whose TLS is found through musl's DTV. musl-gcc sees
# none of the glibc-side libraries, so the extensions needing them (openssl, zlib,
# psych, fiddle, ...) are left out, as configure does for any missing library.
if ! current source-3.3-musl "$v33"; then
  source_build source-3.3-musl ruby3.3 "$v" --enable-shared CC=musl-gcc
  so=$(cd "$root/source-3.3-musl/lib" && ls libruby.so.3.3.* | head -1)
  finish source-3.3-musl "$v33" source "" "$root/source-3.3-musl/ruby" "$root/source-3.3-musl/lib/$so" 1 1
  echo "libc=musl" >>"$root/source-3.3-musl/manifest"
fi
# Stripped, as Alpine ships libruby.
if ! current source-3.3-musl-stripped "$v33"; then
  d=$root/source-3.3-musl-stripped; rm -rf "$d"; mkdir -p "$d"
  so=$(cd "$root/source-3.3-musl/lib" && ls libruby.so.3.3.* | head -1)
  stripped_libruby "$root/source-3.3-musl/lib/$so" "$root/source-3.3-musl/bin/ruby" "$d"
  finish source-3.3-musl-stripped "$v33" source "" "$d/ruby" "$d/$so" 0 0
  echo "libc=musl" >>"$d/manifest"
fi
# libruby linked into the executable (--disable-shared), against musl: its TLS block is
# the program's own, at an offset musl's dynamic linker computes from the program's TLS
# segment at start, not through the DTV.
if ! current source-3.3-musl-static "$v33"; then
  source_build source-3.3-musl-static ruby3.3 "$v" --disable-shared CC=musl-gcc
  objcopy --decompress-debug-sections "$root/source-3.3-musl-static/bin/ruby"
  finish source-3.3-musl-static "$v33" source "" "$root/source-3.3-musl-static/ruby" \
    "$root/source-3.3-musl-static/bin/ruby" 1 1
  echo "libc=musl" >>"$root/source-3.3-musl-static/manifest"
fi
# The same Ruby run through a musl libc as Alpine ships it with musl-dbg installed:
# musl's configure leaves code without unwind tables unless --enable-debug, which puts
# them in .debug_frame, and stripping moves that to the debug file (.debug/libc.so.debug
# beside it, found through its .gnu_debuglink). Built from the musl source Debian serves.
if ! current source-3.3-musl-dbg "$v33"; then
  d=$root/source-3.3-musl-dbg; work=$RUBYPERF_CACHE/build/musl-dbg
  rm -rf "$d" "$work"; mkdir -p "$d/lib/.debug" "$work"
  debian_fetch_source musl "$work" || die "source-3.3-musl-dbg: cannot fetch musl's source"
  log "source-3.3-musl-dbg: building musl $(cat "$work/src/VERSION") --enable-debug"
  (cd "$work/src" && ./configure --prefix="$work/inst" --syslibdir="$work/inst/lib" --enable-debug --disable-static \
    >"$work/configure.log" 2>&1 && make -j"$jobs" >"$work/make.log" 2>&1 && make install >>"$work/make.log" 2>&1) ||
    die "source-3.3-musl-dbg: musl's build failed (see $work)"
  objcopy --only-keep-debug "$work/inst/lib/libc.so" "$d/lib/.debug/libc.so.debug"
  strip --strip-all -o "$d/lib/libc.so" "$work/inst/lib/libc.so"
  objcopy --add-gnu-debuglink="$d/lib/.debug/libc.so.debug" "$d/lib/libc.so"
  rm -rf "$work"
  printf '#!/bin/bash\nexec %s --argv0 ruby %s "$@"\n' "$d/lib/libc.so" "$root/source-3.3-musl/bin/ruby" >"$d/ruby"
  chmod +x "$d/ruby"
  so=$(cd "$root/source-3.3-musl/lib" && ls libruby.so.3.3.* | head -1)
  finish source-3.3-musl-dbg "$v33" source "" "$d/ruby" "$root/source-3.3-musl/lib/$so" 1 1
  echo "libc=musl" >>"$d/manifest"
fi
# Built always, named by the tests that are about musl; in the matrix every test runs on
# (testruby.All) only with RUBYPERF_MUSL_MATRIX=1: with them, 14 Rubies made make test's
# load-measuring tests miss their bounds on a 2-CPU machine (2026-11-29).
if [ "${RUBYPERF_MUSL_MATRIX:-0}" = 1 ]; then matrix+=(source-3.3-musl source-3.3-musl-stripped); fi

# 3.4: Debian's source where it can be downloaded (experimental's pool may not
# serve it); scripts/mirror-rubies.sh builds it from Ruby's repository otherwise.
rm -rf "$srcdir"
if v=$(fetchable_source source-3.4-shared ruby3.4); then
  if ! current source-3.4-shared "$(upstream "$v")"; then
    source_build source-3.4-shared ruby3.4 "$v" --enable-shared
    so=$(cd "$root/source-3.4-shared/lib" && ls libruby.so.3.4.* | head -1)
    finish source-3.4-shared "$(upstream "$v")" source "" "$root/source-3.4-shared/ruby" \
      "$root/source-3.4-shared/lib/$so" 1 1
  fi
  matrix+=(source-3.4-shared)
else
  log "no ruby3.4 source package can be downloaded: 3.4 source builds come from scripts/mirror-rubies.sh"
fi
rm -rf "$srcdir"

# Flavors built by hand from Ruby's repository (local=1) join the matrix when present.
for m in "$root"/*/manifest; do
  d=$(dirname "$m")
  [ -L "$d" ] && continue # another name for a flavor listed under its own
  grep -qx 'local=1' "$m" 2>/dev/null && [ -f "$d/ok" ] && matrix+=("$(basename "$d")")
done
printf '%s\n' "${matrix[@]}" >"$root/matrix.new" && mv "$root/matrix.new" "$root/matrix"
log "ready in $root: ${matrix[*]}"
