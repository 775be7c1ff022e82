// Package symtab owns a recording's Ruby symbol table (Table): what each
// captured frame key (Key: the addresses the program copied) means, by
// name ids the samples carry (NameID, FrameName), and where each process
// image's VM entry function lies (VMExec). The recorder fills it, reading
// each new frame's name from live memory through rubystack (Resolve); a
// reader of a recording takes it back from the file (Decode), where it is
// written as gzipped JSON (Write), one entry at a time, and read within
// bounds.
//
// A frame key is named only for the samples its name can be proven right
// for, a payload.Span of GC intervals: the GC frees code and reuses its
// memory while recording. A name read in the sample's own interval holds
// for it; one of objects in the old generation holds until the next major
// GC, and runs of checks that found the same old objects (OldRun, Check)
// carry it across GCs. A frame no name holds for reads as ReplacedLabel.
// The table holds no more than its share of the recording's memory budget
// (SetBudget): past it frames are named coarsely, then OverBudgetLabel.
//
// It must not load, attach or talk to the BPF program (readers link it
// without cilium/ebpf; internal/archtest checks), nor know how perf.data
// is laid out (perfdata does), what else a recording holds (readback), or
// how the recorder splits its budget and follows its targets (recording).
package symtab
