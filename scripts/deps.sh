#!/usr/bin/env bash
# Installs the Debian packages rubyperf's build, tests and demo need. Idempotent:
# it runs apt-get only when something is missing, so a warm machine pays nothing.
set -euo pipefail

pkgs=(
  ruby3.1            # Debian's Ruby: a stripped libruby, the distro shape we must support
  dwarves            # pahole: an independent oracle for struct offsets
  dpkg-dev           # dpkg-source, to unpack Debian source packages of Ruby
  autoconf bison pkg-config libffi-dev libssl-dev libyaml-dev zlib1g-dev libgmp-dev  # Ruby build deps (Fiddle needs libffi)
  binutils xz-utils
  linux-perf         # stock perf: the oracle for perf.data and native unwinding
  libc6-dbg          # libc's debug file: native frames in libc are named from it (the goldens show them)
  clang-14 llvm libbpf-dev  # compile bpf/ruby.bpf.c (make generate; make test checks it is fresh)
  debuginfod iproute2  # elfutils' debuginfod server, run by the debuginfo tests in a network namespace
  ruby3.1-dev        # its headers: the tests build a C extension into it (Ruby's own count of allocations by class)
  ruby-stackprof     # the in-process profiler make bench compares with
  ruby-memory-profiler  # the in-process allocation profiler make bench compares --alloc with
  ruby-heapy         # a heap-dump reader: `rubyperf heap --dump` must open in it as ObjectSpace.dump_all does
  chromium           # headless, for the browser tests of the SVG and speedscope views
  mmdebstrap         # fresh bookworm and trixie roots, in which the tests install the .deb
  tmux               # a real terminal for the test of rubyperf top
  musl-tools         # musl-gcc: a musl libc build of the TLS test programs and of a test Ruby
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "rubyperf: missing Debian packages: ${missing[*]}; run 'sudo $0' or install them" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
