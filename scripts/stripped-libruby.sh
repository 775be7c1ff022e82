# Sourced by test-rubies.sh and mirror-rubies.sh: a stripped copy of a shared
# libruby that a build's own ruby runs with, as a distro ships it.
#
#   stripped_libruby LIBRUBY RUBY DIR
#
# writes DIR/<libruby's file name> (strip --strip-all: .dynsym only), the
# soname link beside it, and DIR/ruby, which runs RUBY with DIR first on the
# library search path (LD_LIBRARY_PATH comes before the executable's RUNPATH).
stripped_libruby() {
  local vm=$1 exe=$2 d=$3
  local so; so=$(basename "$vm")
  strip --strip-all -o "$d/$so" "$vm"
  local soname; soname=$(readelf -d "$d/$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [ -z "$soname" ] || [ "$soname" = "$so" ] || ln -sf "$so" "$d/$soname"
  printf '#!/bin/bash\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$d" "$exe" >"$d/ruby"
  chmod +x "$d/ruby"
}
