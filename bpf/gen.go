package bpf

// Regenerate with `make generate` (Debian's clang-14 and libbpf-dev). The
// generated ruby_*.go and ruby_*.o are committed, so building needs no clang;
// `make test` fails when they are stale.
//go:generate go tool bpf2go -cc clang-14 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type proc_config -type frame_key -type frame_span -type unwind_row -type exec_map -type row_page -type proc_maps -type alloc_window ruby ruby.bpf.c -- -I.
