#!/usr/bin/env bash
# A private view of Debian's archive for fetching test Rubies, sourced by the
# other scripts. It never changes the system's apt configuration: it has its own
# sources list, package lists and cache under $RUBYPERF_CACHE/apt, covering the
# suites Ruby comes from (bookworm, bookworm-security, trixie, trixie-security,
# experimental), binary and source. The archive's address is the one this
# machine's apt already uses (a mirror stays a mirror).
#
#   debian_archive_init           set up and update (at most once an hour)
#   debian_apt ARGS..             apt-get with the private configuration
#   debian_cache ARGS..           apt-cache with the private configuration
#   debian_versions PKG           "SUITE VERSION" lines, one per suite serving PKG
#   debian_fetch_binary PKG=VER DIR   download the .deb of that exact version into DIR
#   debian_fetch_source PKG=VER DIR   download and unpack its source package into DIR/src
#   debian_upstream VERSION       the upstream release a Debian version packages

: "${RUBYPERF_CACHE:=$HOME/.cache/rubyperf}"
apt_root=$RUBYPERF_CACHE/apt

_debian_site() { # SUITE: the URI this machine's apt uses for that suite
  apt-get indextargets --format '$(SITE) $(RELEASE)' 2>/dev/null | awk -v s="$1" '$2==s {print $1; exit}'
}

debian_archive_init() {
  mkdir -p "$apt_root/lists/partial" "$apt_root/archives/partial" "$apt_root/cache"
  local main sec codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  main=$(_debian_site "$codename")
  sec=$(_debian_site "$codename-security")
  if [ -z "$main" ]; then
    # No lists were ever fetched: apt-get update fills indextargets.
    apt-get update -qq >/dev/null 2>&1 || true
    main=$(_debian_site "$codename"); sec=$(_debian_site "$codename-security")
  fi
  [ -n "$main" ] || { echo "debian-archive: this machine's apt has no '$codename' source; add Debian's archive to apt" >&2; return 1; }
  [ -n "$sec" ] || sec=${main%/debian}/debian-security
  local kr=/usr/share/keyrings/debian-archive-keyring.gpg
  local suite t
  : >"$apt_root/sources.list"
  for t in deb deb-src; do
    for suite in bookworm trixie experimental; do echo "$t [signed-by=$kr] $main $suite main"; done
    for suite in bookworm-security trixie-security; do echo "$t [signed-by=$kr] $sec $suite main"; done
  done >"$apt_root/sources.list"
  local stamp=$apt_root/updated
  if [ -z "$(find "$stamp" -mmin -60 2>/dev/null)" ]; then
    debian_apt update -qq >"$apt_root/update.log" 2>&1 ||
      { tail -5 "$apt_root/update.log" >&2; echo "debian-archive: apt-get update of the private lists failed" >&2; return 1; }
    touch "$stamp"
  fi
}

_debian_opts() {
  printf '%s\n' \
    -o "Dir::Etc::SourceList=$apt_root/sources.list" -o "Dir::Etc::SourceParts=-" \
    -o "Dir::State::Lists=$apt_root/lists" -o "Dir::Cache=$apt_root/cache" \
    -o "Dir::Cache::Archives=$apt_root/archives" -o "Dir::State::Status=/var/lib/dpkg/status" \
    -o "APT::Default-Release=" -o "Acquire::Languages=none" -o "APT::Sandbox::User=root"
}

debian_apt() { local o; mapfile -t o < <(_debian_opts); apt-get "${o[@]}" "$@"; }
debian_cache() { local o; mapfile -t o < <(_debian_opts); apt-cache "${o[@]}" "$@"; }

debian_versions() { # PKG: "SUITE VERSION" for each suite that serves the binary package
  debian_cache madison "$1" 2>/dev/null | awk -F'|' '$3 ~ /Packages/ {
      gsub(/ /, "", $2); split($3, a, " "); s = a[2]; sub(/\/.*/, "", s); print s, $2 }' | sort -u
}

# debian_upstream VERSION: the upstream release inside a Debian version. Epoch and
# Debian revision go; "A+reallyB" (a reverted upload: bookworm-security served
# 3.1.7+really3.1.2 after 3.1.7) packages B; repack and pre-release tags go.
#   1:3.3.14-0+deb13u1 -> 3.3.14    3.1.7+really3.1.2-0+deb12u1 -> 3.1.2    3.4.0~rc1-1 -> 3.4.0
debian_upstream() {
  local v=${1#*:}
  case $v in *-*) v=${v%-*} ;; esac
  case $v in *+really*) v=${v##*+really} ;; esac
  echo "${v%%[+~]*}"
}

debian_fetch_binary() { # PKG=VERSION DIR
  mkdir -p "$2"
  (cd "$2" && debian_apt download -qq "$1" >/dev/null 2>&1) ||
    { echo "debian-archive: apt-get download $1 failed" >&2; return 1; }
}

debian_fetch_source() { # PKG=VERSION DIR
  mkdir -p "$2"
  (cd "$2" && debian_apt source -qq --download-only "$1" >/dev/null 2>&1) ||
    { echo "debian-archive: apt-get source $1 failed" >&2; return 1; }
  local dsc; dsc=$(ls "$2"/*.dsc | head -1)
  rm -rf "$2/src"
  (cd "$2" && dpkg-source --no-check -x "$dsc" src >/dev/null)
}
