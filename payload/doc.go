// Package payload owns what the eBPF program writes for user space: the
// Ruby payload in each sample's RAW field (Payload: decoded, named,
// weighed; its flags, frames, labels, GC stamp and thread facts), the end
// of an off-CPU interval (OffCPUEnd), what an allocation sample's slot
// held a page of allocations later (AllocSeen, joined to its sample by
// AllocKey), and the spans of samples a frame's
// name holds for (Span, NamedFrame), which the recorder tells the program.
// Each sample carries the process's GC stamp (GCStamp: how many GCs it had
// started, and when its last major GC did), so that a name read from
// memory holds only for the samples it can be proven right for.
//
// A recording's file keeps each sample's frames compact, as references
// into two trees of the frames its earlier samples had (TreeEncoder writes
// them, TreeDecoder reads them back in file order): the Ruby and native
// frames the program wrote, unchanged, at a few bytes a sample.
//
// The C structs are declared in types_generated.go from the BTF of bpf's
// committed objects (internal/cmd/btftypes, `make generate`), which must
// lay them out alike on every architecture; nothing here is mirrored by
// hand.
//
// It decodes bytes and must not load, attach or talk to the program:
// readers of a recording link it without cilium/ebpf (internal/archtest
// checks). It must not know about perf.data records around the payload
// (perfdata does) or the recording's symbol table.
package payload
