#!/usr/bin/env bash
# Built-in layout tables (rubybuild/table_<major>_<minor>_<arch>.go) for every Ruby
# patch release, from the DWARF of scripts/layout-probe.c compiled inside each
# release's configured source tree. No Ruby is built: a release needs
# configure, the few generated files its sources include (headers, and
# gc.rbinc, which BASERUBY makes from gc.rb), and six compiles (the probe, and
# iseq.c, st.c, symbol.c, gc.c, hash.c, which keep some structs and enums private; gc.c
# holds struct rb_objspace and enum gc_mode, from 3.4 through
# gc/default/default.c, which it includes). Every number in a table comes from
# DWARF through `rubyperf offsets`: none is typed by hand.
#
#   scripts/gen-tables.sh prepare [VERSION..]  fetch and configure the source trees (default:
#                                             every version, the most valuable first); kept in
#                                             $RUBYPERF_CACHE/tables/VERSION, done once
#   scripts/gen-tables.sh tables              regenerate every table from the trees that exist
#                                             (`make tables`; seconds); absent versions are noted
#   scripts/gen-tables.sh list                each version and where its source comes from
#
# Sources: the tags of a CRuby mirror (RUBY_MIRROR, a bare git directory), 4.0
# releases by the subject of their release commit, and Debian source packages for
# the versions the mirror lacks, found in the archive's source indexes that day
# (scripts/debian-archive.sh; nothing here names a Debian package version). Every tree is configured with
# the same flags ($configure_flags, recorded in each table): Debian's choice of no
# YJIT (rustc on the generating machine must not decide a layout), no docs.
#
# configure dominates the cost (minutes; the rest is seconds). A tree whose
# generated `configure` is byte-identical to an already configured tree of the same
# minor line reuses that tree's results through its config.status (seconds): the
# same configure script with the same flags on the same machine finds the same
# config.h. Each tree records where its configuration came from in config-from.
set -euo pipefail

: "${RUBYPERF_CACHE:=$HOME/.cache/rubyperf}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
mirror=${RUBY_MIRROR:-} # a bare git copy of Ruby's repository; without it only Debian's sources are used
baseruby=${BASERUBY:-/usr/bin/ruby3.1}
trees=$RUBYPERF_CACHE/tables
bin=$repo/bin/rubyperf
probe=$here/layout-probe.c
configure_flags="--disable-install-doc --disable-yjit"
arch=x86_64

# Ruby's own releases, most valuable first: those Debian shipped, the newest patch of
# each line, then the rest (those that can reuse a configured tree's results first).
# Debian's newer uploads are added by debian_listed when preparing.
versions_debian="3.1.2 3.1.7 3.3.8"
versions_newest="3.2.11 3.3.11 3.4.9 4.0.5"
versions_rest="3.1.0 3.1.1 3.1.5 3.1.6 3.2.9 3.2.10 3.3.5 3.3.6 3.3.7 3.4.8 4.0.4
  4.0.0 4.0.1 4.0.2 4.0.3 3.3.9 3.3.10 3.4.5 3.4.6 3.4.7 3.4.2 3.4.3 3.4.4 3.4.0 3.4.1
  3.2.6 3.2.7 3.2.8 3.2.0 3.2.1 3.2.2 3.2.3 3.2.4 3.2.5 3.3.0 3.3.1 3.3.2 3.3.3 3.3.4
  3.1.3 3.1.4"
# all_versions: the releases above and every version whose tree was prepared.
all_versions() {
  { echo $versions_debian $versions_newest $versions_rest | tr ' ' '\n'
    ls "$trees" 2>/dev/null | grep -E '^[0-9]+\.[0-9]+\.[0-9]+$' || true; } | awk 'NF && !seen[$0]++' | tr '\n' ' '
}

debian_ready=
debian_init() {
  [ -n "$debian_ready" ] && return 0
  # shellcheck source=debian-archive.sh
  source "$here/debian-archive.sh"
  debian_archive_init && debian_ready=1
}

# debian_sources MINOR: "UPSTREAM PKG=VERSION" for each ruby$MINOR source the archive lists.
debian_sources() {
  debian_init || return 0
  local v
  for v in $(debian_cache showsrc "ruby$1" 2>/dev/null | awk '/^Version:/ {print $2}'); do
    echo "$(debian_upstream "$v") ruby$1=$v"
  done | sort -u
}

# debian_listed: the upstream versions Debian lists sources for.
debian_listed() { for m in 3.1 3.2 3.3 3.4 4.0; do debian_sources "$m"; done | awk '{print $1}' | sort -uV; }

# debian_package VERSION: the newest Debian source package of that upstream version.
debian_package() { debian_sources "${1%.*}" | awk -v v="$1" '$1 == v {print $2}' | sort -V | tail -1; }

log() { echo "gen-tables: $*" >&2; }

# origin VERSION: "git COMMIT" or "debian PKG=VER", or nothing.
origin() {
  local v=$1 pkg rev=
  if [ -z "$mirror" ]; then
    :
  elif [ "${v%%.*}" -ge 4 ]; then
    # 4.x releases are found by the subject of their release commit ("v4.0.5").
    rev=$(git --git-dir="$mirror" log --all -E --grep="^v${v//./\\.}\$" --format=%H -1 2>/dev/null || true)
  else
    rev=$(git --git-dir="$mirror" rev-parse -q --verify "v${v//./_}^{commit}" 2>/dev/null || true)
  fi
  if [ -n "$rev" ]; then echo "git $rev"; return; fi
  pkg=$(debian_package "$v")
  [ -n "$pkg" ] && echo "debian $pkg"
  return 0
}

# fetch VERSION DIR: unpack the source into DIR/src, with a configure script.
fetch() {
  local v=$1 dir=$2 o; o=$(origin "$v")
  rm -rf "$dir/src" "$dir/deb"
  case $o in
    git\ *)
      mkdir -p "$dir/src"
      git --git-dir="$mirror" archive "${o#git }" | tar -x -C "$dir/src"
      (cd "$dir/src" && ./autogen.sh >"$dir/autogen.log" 2>&1) ||
        { tail -5 "$dir/autogen.log" >&2; return 1; } ;;
    debian\ *)
      debian_init
      debian_fetch_source "${o#debian }" "$dir/deb" || return 1
      mv "$dir/deb/src" "$dir/src"; rm -rf "$dir/deb"
      # Debian's patches touch configure.ac: regenerate configure so it matches.
      (cd "$dir/src" && autoconf) ;;
    *) log "$v: no source (not a tag or release commit in $mirror, nor a Debian package)"; return 1 ;;
  esac
  echo "$o" >"$dir/origin"
}

flags_for() { # SRCDIR: the configure flags for that tree (4.0+ also has ZJIT)
  local f=$configure_flags
  grep -q 'zjit' "$1/configure.ac" && f="$f --disable-zjit"
  echo "$f"
}

# dev_build DIR: "yes" when the tree's version.h says a development build.
dev_build() {
  if grep -q '^#define RUBY_PATCHLEVEL -1' "$1/src/version.h"; then echo yes; else echo no; fi
}

# configure_tree VERSION DIR: configure, or reuse the results of a configured
# tree of the same line whose configure script is byte-identical.
configure_tree() {
  local v=$1 dir=$2 flags d teeny line=${1%.*}
  flags=$(flags_for "$dir/src")
  for d in "$trees"/"$line".*/; do
    d=${d%/}
    [ "$d" != "$dir" ] && [ -f "$d/ready" ] && [ ! -s "$d/config-from" ] || continue
    [ "$(cat "$d/flags")" = "$flags" ] && cmp -s "$d/src/configure" "$dir/src/configure" || continue
    # configure also reads whether version.h is a development build (patch level
    # -1 defines RUBY_ABI_VERSION in config.h): 3.4.0 was tagged as one, 3.4.1 not.
    [ "$(dev_build "$d")" = "$(dev_build "$dir")" ] || continue
    log "$v: configure is identical to $(basename "$d")'s: reusing its results"
    # config.status holds configure's results; of this tree, only its path and its
    # patch number (read from version.h, as configure does) differ.
    teeny=$(sed -n 's/^#define RUBY_VERSION_TEENY \([0-9]*\)$/\1/p' "$dir/src/version.h")
    [ -n "$teeny" ] || { log "$v: no RUBY_VERSION_TEENY in version.h"; return 1; }
    sed -e "s|$d/src|$dir/src|g" -e "s|^S\[\"TEENY\"\]=.*|S[\"TEENY\"]=\"$teeny\"|" \
      "$d/src/config.status" >"$dir/src/config.status"
    chmod +x "$dir/src/config.status"
    (cd "$dir/src" && nice -n 10 ./config.status >"$dir/configure.log" 2>&1) ||
      { tail -5 "$dir/configure.log" >&2; return 1; }
    # configure writes config.h itself, from its results (confdefs.h), not through
    # config.status: the same results give the same file.
    (cd "$d/src" && find .ext/include -path '*/ruby/config.h') | while read -r h; do
      mkdir -p "$dir/src/$(dirname "$h")" && cp -p "$d/src/$h" "$dir/src/$h"
    done
    basename "$d" >"$dir/config-from"
    echo "$flags" >"$dir/flags"
    return 0
  done
  log "$v: configure $flags"
  # shellcheck disable=SC2086
  (cd "$dir/src" && nice -n 10 ./configure $flags --with-baseruby="$baseruby" >"$dir/configure.log" 2>&1) ||
    { tail -20 "$dir/configure.log" >&2; return 1; }
  : >"$dir/config-from"
  echo "$flags" >"$dir/flags"
}

# The .c files of Ruby whose objects are linked with the probe: they keep
# structs or enums private (iseq.c: succ_index_table, succ_dict_block; st.c:
# st_table_entry; symbol.c: enum id_entry_type, rb_symbols_t from 4.0; gc.c:
# struct rb_objspace, enum gc_mode). The recorded --source names them.
private_sources="iseq.c st.c symbol.c gc.c hash.c"

# layout_object DIR: compile the probe (when it changed) and the .c files that
# keep structs private, with Ruby's own flags, into DIR/rubyperf-layout.o.
# source_defines SRC: the #define lines of the flags the probe turns into
# enumerators (scripts/layout-probe.c), copied from the tree's own sources.
source_defines() {
  (cd "$1" && grep -h -E '^#define (RARRAY_SHARED_ROOT_FLAG)[[:space:]]' array.c internal/array.h 2>/dev/null | sort -u)
}

layout_object() {
  local dir=$1 src=$1/src cflags c objs=()
  source_defines "$src" >"$src/rubyperf-defines.h.new"
  cmp -s "$src/rubyperf-defines.h.new" "$src/rubyperf-defines.h" && rm "$src/rubyperf-defines.h.new" ||
    { mv "$src/rubyperf-defines.h.new" "$src/rubyperf-defines.h"; rm -f "$dir/rubyperf-layout.o"; }
  for c in $private_sources; do objs+=("${c%.c}.o"); done
  # A configured tree does not change: only a new probe, or a new list of
  # objects to link (recorded in DIR/layout-objects), needs a new object.
  [ -f "$dir/rubyperf-layout.o" ] && [ "$dir/rubyperf-layout.o" -nt "$probe" ] &&
    [ "$(cat "$dir/layout-objects" 2>/dev/null)" = "${objs[*]}" ] && return 0
  local mk; mk=$(mktemp)
  printf 'rubyperf-probe-flags:\n\t@echo $(CC) $(CFLAGS) $(XCFLAGS) $(CPPFLAGS)\n' >"$mk"
  # make builds the generated files these include (id.h, insns.inc, probes.h,
  # gc.rbinc with BASERUBY, ...).
  (cd "$src" && nice -n 10 make -s "${objs[@]}" >"$dir/make.log" 2>&1) ||
    { rm -f "$mk"; tail -20 "$dir/make.log" >&2; return 1; }
  cflags=$(cd "$src" && make -s -f GNUmakefile -f "$mk" rubyperf-probe-flags 2>/dev/null | tail -1)
  rm -f "$mk"
  # -fno-eliminate-unused-debug-types: describe every type the headers declare.
  # shellcheck disable=SC2086
  (cd "$src" && nice -n 10 $cflags -fno-eliminate-unused-debug-types -w \
      -o rubyperf-probe.o -c "$probe") || return 1
  ld -r -o "$dir/rubyperf-layout.o.tmp" "$src/rubyperf-probe.o" "${objs[@]/#/$src/}" &&
    mv "$dir/rubyperf-layout.o.tmp" "$dir/rubyperf-layout.o" &&
    echo "${objs[*]}" >"$dir/layout-objects"
}

prepare() {
  local v dir t0
  for v in "$@"; do
    dir=$trees/$v
    if [ -f "$dir/ready" ] && [ -f "$dir/rubyperf-layout.o" ]; then
      continue
    fi
    t0=$(date +%s)
    mkdir -p "$dir"; rm -f "$dir/ready"
    if [ ! -f "$dir/src/configure" ] || [ ! -f "$dir/origin" ]; then
      fetch "$v" "$dir" || { log "$v: skipped: its source cannot be fetched"; rm -rf "$dir"; continue; }
    fi
    if [ ! -f "$dir/src/config.status" ] || [ ! -f "$dir/flags" ] || [ "$(cat "$dir/flags")" != "$(flags_for "$dir/src")" ] ||
       [ -z "$(find "$dir/src/.ext/include" -path '*/ruby/config.h' 2>/dev/null)" ]; then
      configure_tree "$v" "$dir" || { log "$v: configure failed: see $dir/configure.log"; continue; }
    fi
    layout_object "$dir" || { log "$v: the probe did not compile: see $dir/make.log"; continue; }
    touch "$dir/ready"
    log "$v: ready in $(( $(date +%s) - t0 ))s"
  done
}

tables() {
  [ -x "$bin" ] || { log "$bin is missing: run make build"; return 1; }
  local line v dir objs flags missing out
  for line in $(all_versions | tr ' ' '\n' | sed 's/\.[0-9]*$//' | sort -uV); do
    objs=() missing=() flags=
    for v in $(all_versions | tr ' ' '\n' | grep "^${line//./\\.}\." | sort -V); do
      dir=$trees/$v
      if [ ! -f "$dir/ready" ]; then missing+=("$v"); continue; fi
      layout_object "$dir" || { log "$v: the probe did not compile: see $dir/make.log"; return 1; }
      objs+=("$dir/rubyperf-layout.o")
      if [ -n "$flags" ] && [ "$flags" != "$(cat "$dir/flags")" ]; then
        log "$line: trees configured with different flags ($flags; $(cat "$dir/flags")): run prepare again"
        return 1
      fi
      flags=$(cat "$dir/flags")
    done
    [ ${#missing[@]} -eq 0 ] || log "$line: no tree for ${missing[*]} (scripts/gen-tables.sh prepare ${missing[*]})"
    if [ ${#objs[@]} -eq 0 ]; then
      log "$line: no tree at all: its table is left as it is"
      continue
    fi
    out=$repo/rubybuild/table_${line//./_}_${arch}.go
    "$bin" offsets --format go --configure "$flags" \
      --source "scripts/layout-probe.c with $(echo $private_sources | sed 's/ /, /g'), compiled in the configured source tree" \
      "${objs[@]}" >"$out.tmp" && mv "$out.tmp" "$out" || { rm -f "$out.tmp"; return 1; }
    log "$line: $(basename "$out"): ${#objs[@]} versions"
  done
}

case ${1:-} in
  prepare) shift; if [ $# -eq 0 ]; then set -- $(all_versions) $(debian_listed); fi
    prepare $(echo "$@" | tr ' ' '\n' | awk 'NF && !seen[$0]++') ;;
  tables) tables ;;
  list) for v in $(echo $(all_versions) $(debian_listed) | tr ' ' '\n' | awk 'NF && !seen[$0]++'); do
      echo "$v $(origin "$v")"; done ;;
  *) sed -n '2,/^set -e/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
