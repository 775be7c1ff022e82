#!/bin/sh
# Rebuilds the fuzz seeds and fixtures from fakeruby.c.
set -e
cd "$(dirname "$0")"
gcc -g -O1 -shared -fPIC -o fakeruby.so fakeruby.c
gcc -g -O1 -shared -fPIC -Wl,--compress-debug-sections=zlib -o fakeruby-zlib.so fakeruby.c
gcc -g -O1 -shared -fPIC -Wl,--compress-debug-sections=zstd -o fakeruby-zstd.so fakeruby.c
