package payload

// The C structs the program writes (payload_header, frame, label,
// offcpu_end), declared from the BTF of the committed BPF objects, which
// must lay them out alike: regenerate with `make generate`, after bpf's.
//go:generate go run ../internal/cmd/btftypes -pkg payload -prefix c -o types_generated.go ../bpf/ruby_x86_bpfel.o ../bpf/ruby_arm64_bpfel.o -- payload_header frame label offcpu_end alloc_seen
