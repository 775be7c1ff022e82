package rubybuild

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"strings"
)

// Layout is everything the stack walker and symbolizer know about one Ruby
// build: field offsets, struct sizes, flag values, and capability flags that
// name behaviours instead of versions. One walker reads every Ruby through it.
//
// An offset of -1 means the field does not exist in this build; the
// capability flags say which alternative applies.
type Layout struct {
	Version Version
	Arch    string
	Source  string // where it came from: "dwarf:PATH" or "table:VERSION/ARCH"

	ExecutionContext struct {
		VMStack, VMStackSize, CFP, ThreadPtr, FiberPtr int64
	}
	ControlFrame struct {
		Size                              int64
		PC, SP, Iseq, Self, EP, JITReturn int64
	}
	Iseq struct {
		Body int64
	}
	IseqBody struct {
		Type, IseqSize, IseqEncoded                  int64
		Path, BaseLabel, Label, FirstLineno          int64 // location.*
		FirstLinenoSize                              int64 // 8: a Fixnum VALUE (≤3.1); 4: an int
		InsnsInfoBody, InsnsInfoSize, SuccIndexTable int64
		InsnsInfoPositions                           int64
		ParentIseq, LocalIseq                        int64
	}
	InsnInfoEntry struct {
		Size, LineNo int64
	}
	// SuccIndexTable is iseq.c's succinct bit vector from instruction
	// positions to line-table entries.
	SuccIndexTable struct {
		ImmPart, SuccPart                     int64
		BlockSize, BlockRank, BlockSmallRanks int64 // struct succ_dict_block
		BlockBits                             int64
	}
	MethodEntry struct {
		Flags, DefinedClass, Def, CalledID, Owner int64
	}
	MethodDefinition struct {
		Type           Member // a 4-bit field at the start
		IseqPtr, CFunc int64  // body.iseq.iseqptr, body.cfunc.func
		OriginalID     int64
	}
	SVar struct {
		CrefOrMe int64
	}
	Basic struct {
		Flags, Klass int64
	}
	String struct {
		Len                  int64 // RString.len (3.3+), -1 before
		HeapLen, HeapPtr     int64 // as.heap.len (≤3.2), as.heap.ptr
		EmbedLen, EmbedBytes int64 // as.embed.len (3.2 only), as.embed.ary
		// Capa is as.heap.aux.capa: the bytes of a string's own buffer
		// (less its terminator), what ObjectSpace.memsize_of counts
		// beyond the slot; -1 where the layout lacks it.
		Capa int64
	}
	Array struct {
		HeapLen, HeapPtr, EmbedBytes int64 // as.heap.len, as.heap.ptr, as.ary
		Capa                         int64 // as.heap.aux.capa: elements its own buffer holds; -1 absent
	}
	// Symbol is a dynamic Symbol (struct RSymbol): its ID. -1 where the
	// layout lacks it (the built-in tables) and the binary's code does not
	// give it either.
	Symbol struct {
		ID int64
		// Type is RUBY_T_SYMBOL: from the layout's constants, else the tag
		// the binary's rb_sym2id checks a Symbol against; -1 unknown.
		Type int64
		// IDHow says how ID was found when the layout's source lacks it (a
		// table: from the binary's rb_sym2id), "" when the source gave it;
		// IDWhy, why it is missing.
		IDHow, IDWhy string
	}
	Class struct {
		Size           int64 // sizeof(struct RClass): the classext follows it (3.2+ builds with variable-width slots)
		Super          int64 // RClass.super (≤3.4), -1 when it lives in the classext
		ClassextSuper  int64 // rb_classext_struct.super (4.0+: per Ruby::Box)
		Ptr            int64 // RClass.ptr to a separate classext (≤3.1), -1 when embedded
		ClassextIvTbl  int64 // rb_classext_struct.iv_tbl (≤3.1)
		ClassPath      int64 // rb_classext_struct.classpath (3.3+)
		AttachedObject int64 // rb_classext_struct.as.singleton_class.attached_object (3.3+)
		FieldsObj      int64 // rb_classext_struct.fields_obj (4.0+): an imemo holding the ivars
	}
	// Shape is an object shape (3.2+): classes and modules keep their
	// instance variables in classext.iv_ptr (3.2-3.4) or in the fields
	// object of classext.fields_obj (4.0+), indexed through the shape tree.
	Shape struct {
		Size, EdgeName, NextIvIndex, Type, ParentID int64
		NextIvIndexSize                             int64 // sizeof(attr_index_t)
		ParentIDSize                                int64 // sizeof(shape_id_t)
		TreeShapeList                               int64 // rb_shape_tree_t.shape_list (3.3+)
		VMShapeList                                 int64 // rb_vm_struct.shape_list (3.2)
		ClassextIvPtr                               int64 // rb_classext_struct.iv_ptr (3.2-3.4)
		// Capacity is rb_shape.capacity: the instance variables an object
		// of this shape has room for (a 2- or 4-byte count; Size 0 absent).
		Capacity Member
	}
	// Object is struct RObject: where an object's instance variables are
	// when they do not fit its slot. NumIV is as.heap.numiv (≤3.1: how
	// many, -1 after: the object's shape says, Shape.Capacity); IVs is
	// as.heap.ivptr or as.heap.fields (4.0+): the array, or for an object
	// whose shape is too complex, the st_table holding them.
	Object struct {
		NumIV, IVs int64
	}
	// Fields is struct rb_fields (4.0+), the imemo a class's ivars live in:
	// inline, or behind a pointer when flagged ROBJECT_HEAP.
	Fields struct {
		Embed, Heap int64 // as.embed.fields, as.external.ptr
	}
	StTable struct {
		EntriesStart, EntriesBound, Entries int64
		EntrySize, EntryKey, EntryRecord    int64
		// What st_memsize counts: sizeof(st_table), its bins (when Bins
		// is not NULL: 2^(BinPower+SizeInd) bytes) and its 2^EntryPower
		// entries (unsigned chars; -1 where the layout lacks them).
		Size, Bins, EntryPower, BinPower, SizeInd int64
	}
	// Hash is struct RHash: where its table is. Up to 3.2 as.st (or as.ar,
	// possibly NULL) points to it; from 3.3 it follows the RHash in the
	// slot (St and Ar -1). ArSize is sizeof(ar_table), the small table of
	// up to 8 pairs; -1 where the layout lacks it.
	Hash struct {
		St, Ar, Size, ArSize int64
	}
	Symbols struct {
		LastID, NextID, IDs int64 // rb_symbols_t: last_id (≤3.4) or next_id (4.0+), ids
	}
	VM struct {
		MainRactor, MainThread int64 // ractor.main_ractor, ractor.main_thread
		ObjSpace               int64 // objspace (≤3.3) or gc.objspace (3.4+)
	}
	Ractor struct {
		ThreadsSet, RunningEC, MainThread int64
		// GVLOwner is the thread holding the Ractor's GVL, NULL while
		// nobody does: threads.gvl.owner (≤3.2) or threads.sched.running
		// (3.3+). RunningEC is only the last to take it: it stays when
		// the GVL is released. -1 where the layout lacks it.
		GVLOwner int64
	}
	Thread struct {
		Self, VM, EC, ThreadID, NativeThread, LtNode, LtNodeNext int64
		TID, Name                                                int64 // tid (≤3.1; nt->tid after), name
		// Ractor is the thread's Ractor (its GVL's owner); UnblockFunc is
		// unblock.func, set while the thread is in a blocking region (it
		// released the GVL to sleep, wait or do I/O) and cleared before it
		// asks for the GVL again. -1 where the layout lacks them.
		Ractor, UnblockFunc int64
	}
	NativeThread struct {
		ThreadID, TID int64
	}
	// GC is what tells, for a sample, whether the code at an address may
	// have been freed and replaced since a name was read there: the count
	// of GCs started, the count when the last major GC started, and the
	// GC's phase. Offsets are from the objspace (vm->objspace); -1 (and a
	// zero BitSize) when the layout has no rb_objspace (a stripped build
	// whose table predates it).
	GC struct {
		Count       int64 // rb_objspace profile.count
		LastMajorGC int64 // rb_objspace rgengc.last_major_gc
		// MinorCount and MajorCount (profile.minor_gc_count and
		// major_gc_count) add up to Count: a table's offsets are checked
		// against the live process by that.
		MinorCount, MajorCount int64
		// CompactCount is profile.compact_count: compactions run, each of
		// which may move objects between slots; -1 when absent.
		CompactCount int64
		Mode         Member // flags.mode: a gc_mode
		Compacting   Member // flags.during_compacting
		// Running is flags.during_gc: a GC is under way (marking, sweeping
		// or compacting) on the thread that holds the GVL. The mode alone
		// does not tell: incremental marking and lazy sweeping leave it
		// set between steps while Ruby code runs.
		Running Member
		// RunningHow says how Running was found when the layout's source
		// lacks it (a table: from the binary's rb_during_gc), "" when the
		// source gave it; RunningWhy, why it is missing.
		RunningHow, RunningWhy string
	}

	// HeapPage is where Rubies from 3.3 keep an object's age (how many GC
	// markings it survived): two bits a slot in the age_bits of the
	// struct heap_page its slot is in, found through the struct
	// heap_page_header at the start of the page's aligned body. Slots are
	// numbered in units of the smallest slot from that start. -1 (and 0
	// sizes) when absent: ages are in the flags (AgeBits), or unknown.
	HeapPage struct {
		AgeBits     int64 // heap_page age_bits
		AgeBitsSize int64 // its bytes
		MarkBits    int64 // heap_page mark_bits: one bit a slot, set for what the last marking reached
		// heap_page wb_unprotected_bits: one bit a slot, set for an object
		// without write barriers, which the GC never ages
		WBUnprotectedBits int64
		Page              int64 // heap_page_header page
		Align             int64 // HEAP_PAGE_ALIGN: a page body's alignment and size
		SlotSize          int64 // the smallest slot: HEAP_PAGE_OBJ_LIMIT of them fill a page after its header
	}

	// Allocated is where the GC counts the objects allocated since the
	// process started (GC.stat(:total_allocated_objects)): a counter in
	// the objspace (3.1, 3.2), or one in each of an array of size pools
	// (3.3) or heaps (3.4+), whose sum it is. Offsets are from the
	// objspace; -1 when the layout does not say.
	Allocated struct {
		Counter int64 // rb_objspace total_allocated_objects, or -1
		// Pools: the array of size pools or heaps, Count of them Stride
		// bytes apart, each counting at PoolCounter; Pools -1: none.
		Pools, Count, Stride, PoolCounter int64
		// PagePool is where a heap page points to its pool (heap_page
		// size_pool, or heap from 3.4), -1 when absent.
		PagePool int64
	}

	// Heap is where the GC lists its heap pages, sorted by address, and
	// where each page's slots are: what a census of the live heap walks.
	// Offsets of Pages and Count are from the objspace; -1 when the layout
	// does not say (Heap.Pages < 0).
	Heap struct {
		// Pages is rb_objspace heap_pages.sorted: an array of struct
		// heap_page pointers, Count (heap_pages.allocated_pages) long; or,
		// where Darray, a pointer to an rb_darray of them, its length at
		// DarrayLen and its elements from DarrayData.
		Pages, Count          int64
		Darray                bool
		DarrayLen, DarrayData int64
		Start                 int64  // heap_page start: the first slot's address
		TotalSlots, SlotSize  Member // heap_page total_slots and slot_size (2-byte counts)
	}

	// Constants are the enumerator values read with the layout (flag bits,
	// type tags, frame magics), by their C names.
	Constants map[string]int64

	Capabilities Capabilities

	// Structs is the raw layout this was resolved from.
	Structs Structs
}

// Capabilities name what differs between Ruby builds, so the walker branches on
// behaviour rather than on version numbers.
type Capabilities struct {
	// FirstLinenoFixnum: location.first_lineno is a Fixnum VALUE (≤3.1), not an int.
	FirstLinenoFixnum bool
	// StringLenField: RString.len holds the length of embedded and heap strings (3.3+).
	StringLenField bool
	// StringEmbedLenInFlags: an embedded string's length is in its flags (≤3.1).
	StringEmbedLenInFlags bool
	// ClassextEmbedded: the classext follows struct RClass in the same slot (3.3+).
	ClassextEmbedded bool
	// ClassPathField: a class's path is rb_classext_struct.classpath (3.3+);
	// otherwise it is the __classpath__ instance variable.
	ClassPathField bool
	// NativeThreadStruct: thread ids live in rb_thread_struct.nt (3.2+).
	NativeThreadStruct bool
	// SymbolsNextID: rb_symbols_t counts with next_id (exclusive) rather than last_id.
	SymbolsNextID bool
	// CFuncFrames: rb_profile_frames reports C-method frames (3.0+).
	CFuncFrames bool
	// SkipDummyBottomFrame: the walk ends one frame above the end of the VM
	// stack and drops Ruby frames with a NULL pc (3.2+).
	SkipDummyBottomFrame bool
	// TopJITFrameLineZero: the top frame's line is 0 when it runs JIT code
	// (cfp->jit_return set), its pc being stale (3.3+).
	TopJITFrameLineZero bool
	// ClassIvarsInShapes: class and module instance variables are indexed by
	// a shape (3.2+), not kept in an st_table.
	ClassIvarsInShapes bool
	// ClassFieldsObject: those ivars live in a separate fields object
	// (classext.fields_obj, which carries the shape id in its own flags) (4.0+),
	// not in classext.iv_ptr under the class's shape.
	ClassFieldsObject bool
	// ShapeListInVM: the shape list is rb_vm_t.shape_list (3.2), not
	// rb_shape_tree_t.shape_list.
	ShapeListInVM bool
	// SuperInClassext: a class's superclass is classext.super (4.0+), not RClass.super.
	SuperInClassext bool
	// TopFramePCRangeCheck: rb_profile_frames gives line 0 for a top frame
	// whose pc lies outside its iseq (4.0+), instead of trusting jit_return.
	TopFramePCRangeCheck bool
	// GCStamps: the layout has the GC's counters and phase (Layout.GC) and
	// the old-generation flag bit (RUBY_FL_PROMOTED), so a sample can say
	// which GC interval it was taken in and a name how long it holds.
	GCStamps bool
	// GCPhase: a sample can say whether the GC was running and in which
	// phase (GC.Running in the word of GC.Mode), on top of GCStamps.
	GCPhase bool
	// BlockingRegion: a thread's unblock.func says whether it is in a
	// blocking region (Thread.UnblockFunc), which tells a thread blocked in
	// sleep, I/O or a lock from one waiting for the GVL.
	BlockingRegion bool
}

// field says where one Layout field comes from.
type field struct {
	dst      *int64
	strct    string
	member   string // "" for the struct's size; "a|b" where versions name it differently
	optional bool
}

// fields lists every Layout offset and its source. It is the only place that
// maps Ruby's names to the Layout, for DWARF and tables alike.
func (l *Layout) fields() []field {
	ec, cf, body := &l.ExecutionContext, &l.ControlFrame, &l.IseqBody
	const (
		opt = true
		req = false
	)
	f := func(dst *int64, s, m string, optional bool) field { return field{dst, s, m, optional} }
	return []field{
		f(&ec.VMStack, "rb_execution_context_struct", "vm_stack", req),
		f(&ec.VMStackSize, "rb_execution_context_struct", "vm_stack_size", req),
		f(&ec.CFP, "rb_execution_context_struct", "cfp", req),
		f(&ec.ThreadPtr, "rb_execution_context_struct", "thread_ptr", req),
		f(&ec.FiberPtr, "rb_execution_context_struct", "fiber_ptr", req),

		f(&cf.Size, "rb_control_frame_struct", "", req),
		f(&cf.PC, "rb_control_frame_struct", "pc", req),
		f(&cf.SP, "rb_control_frame_struct", "sp", req),
		f(&cf.Iseq, "rb_control_frame_struct", "iseq", req),
		f(&cf.Self, "rb_control_frame_struct", "self", req),
		f(&cf.EP, "rb_control_frame_struct", "ep", req),
		f(&cf.JITReturn, "rb_control_frame_struct", "jit_return", opt),

		f(&l.Iseq.Body, "rb_iseq_struct", "body", req),

		f(&body.Type, "rb_iseq_constant_body", "type", req),
		f(&body.IseqSize, "rb_iseq_constant_body", "iseq_size", req),
		f(&body.IseqEncoded, "rb_iseq_constant_body", "iseq_encoded", req),
		f(&body.Path, "rb_iseq_constant_body", "location.pathobj", req),
		f(&body.BaseLabel, "rb_iseq_constant_body", "location.base_label", req),
		f(&body.Label, "rb_iseq_constant_body", "location.label", req),
		f(&body.FirstLineno, "rb_iseq_constant_body", "location.first_lineno", req),
		f(&body.InsnsInfoBody, "rb_iseq_constant_body", "insns_info.body", req),
		f(&body.InsnsInfoSize, "rb_iseq_constant_body", "insns_info.size", req),
		f(&body.SuccIndexTable, "rb_iseq_constant_body", "insns_info.succ_index_table", req),
		f(&body.InsnsInfoPositions, "rb_iseq_constant_body", "insns_info.positions", opt),
		f(&body.ParentIseq, "rb_iseq_constant_body", "parent_iseq", req),
		f(&body.LocalIseq, "rb_iseq_constant_body", "local_iseq", req),

		f(&l.InsnInfoEntry.Size, "iseq_insn_info_entry", "", req),
		f(&l.InsnInfoEntry.LineNo, "iseq_insn_info_entry", "line_no", req),

		f(&l.SuccIndexTable.ImmPart, "succ_index_table", "imm_part", req),
		f(&l.SuccIndexTable.SuccPart, "succ_index_table", "succ_part", req),
		f(&l.SuccIndexTable.BlockSize, "succ_dict_block", "", req),
		f(&l.SuccIndexTable.BlockRank, "succ_dict_block", "rank", req),
		f(&l.SuccIndexTable.BlockSmallRanks, "succ_dict_block", "small_block_ranks", req),
		f(&l.SuccIndexTable.BlockBits, "succ_dict_block", "bits", req),

		f(&l.MethodEntry.Flags, "rb_callable_method_entry_struct", "flags", req),
		f(&l.MethodEntry.DefinedClass, "rb_callable_method_entry_struct", "defined_class", req),
		f(&l.MethodEntry.Def, "rb_callable_method_entry_struct", "def", req),
		f(&l.MethodEntry.CalledID, "rb_callable_method_entry_struct", "called_id", req),
		f(&l.MethodEntry.Owner, "rb_callable_method_entry_struct", "owner", req),

		f(&l.MethodDefinition.IseqPtr, "rb_method_definition_struct", "body.iseq.iseqptr", req),
		f(&l.MethodDefinition.CFunc, "rb_method_definition_struct", "body.cfunc.func", req),
		f(&l.MethodDefinition.OriginalID, "rb_method_definition_struct", "original_id", req),

		f(&l.SVar.CrefOrMe, "vm_svar", "cref_or_me", req),

		f(&l.Basic.Flags, "RBasic", "flags", req),
		f(&l.Basic.Klass, "RBasic", "klass", req),

		f(&l.String.Len, "RString", "len", opt),
		f(&l.String.HeapLen, "RString", "as.heap.len", opt),
		f(&l.String.HeapPtr, "RString", "as.heap.ptr", req),
		f(&l.String.EmbedLen, "RString", "as.embed.len", opt),
		f(&l.String.EmbedBytes, "RString", "as.embed.ary", req),
		f(&l.String.Capa, "RString", "as.heap.aux.capa", opt),

		f(&l.Array.HeapLen, "RArray", "as.heap.len", req),
		f(&l.Array.HeapPtr, "RArray", "as.heap.ptr", req),
		f(&l.Array.EmbedBytes, "RArray", "as.ary", req),
		f(&l.Array.Capa, "RArray", "as.heap.aux.capa", opt),

		f(&l.Symbol.ID, "RSymbol", "id", opt),

		f(&l.Class.Size, "RClass", "", req),
		f(&l.Class.Super, "RClass", "super", opt),
		f(&l.Class.ClassextSuper, "rb_classext_struct", "super", opt),
		f(&l.Class.Ptr, "RClass", "ptr", opt),
		f(&l.Class.ClassextIvTbl, "rb_classext_struct", "iv_tbl", opt),
		f(&l.Class.ClassPath, "rb_classext_struct", "classpath", opt),
		f(&l.Class.AttachedObject, "rb_classext_struct", "as.singleton_class.attached_object", opt),
		f(&l.Class.FieldsObj, "rb_classext_struct", "fields_obj", opt),

		f(&l.Shape.Size, "rb_shape", "", opt),
		f(&l.Shape.EdgeName, "rb_shape", "edge_name", opt),
		f(&l.Shape.NextIvIndex, "rb_shape", "next_iv_index|next_field_index", opt),
		f(&l.Shape.Type, "rb_shape", "type", opt),
		f(&l.Shape.ParentID, "rb_shape", "parent_id", opt),
		f(&l.Shape.TreeShapeList, "rb_shape_tree_t", "shape_list", opt),
		f(&l.Shape.VMShapeList, "rb_vm_struct", "shape_list", opt),
		f(&l.Shape.ClassextIvPtr, "rb_classext_struct", "iv_ptr", opt),
		f(&l.Shape.Capacity.Offset, "rb_shape", "capacity", opt),
		f(&l.Object.NumIV, "RObject", "as.heap.numiv", opt),
		f(&l.Object.IVs, "RObject", "as.heap.ivptr|as.heap.fields", opt),
		f(&l.Fields.Embed, "rb_fields", "as.embed.fields", opt),
		f(&l.Fields.Heap, "rb_fields", "as.external.ptr", opt),

		f(&l.StTable.EntriesStart, "st_table", "entries_start", req),
		f(&l.StTable.EntriesBound, "st_table", "entries_bound", req),
		f(&l.StTable.Entries, "st_table", "entries", req),
		f(&l.StTable.EntrySize, "st_table_entry", "", req),
		f(&l.StTable.EntryKey, "st_table_entry", "key", req),
		f(&l.StTable.EntryRecord, "st_table_entry", "record", req),
		f(&l.StTable.Size, "st_table", "", opt),
		f(&l.StTable.Bins, "st_table", "bins", opt),
		f(&l.StTable.EntryPower, "st_table", "entry_power", opt),
		f(&l.StTable.BinPower, "st_table", "bin_power", opt),
		f(&l.StTable.SizeInd, "st_table", "size_ind", opt),
		f(&l.Hash.St, "RHash", "as.st", opt),
		f(&l.Hash.Ar, "RHash", "as.ar", opt),
		f(&l.Hash.Size, "RHash", "", opt),
		f(&l.Hash.ArSize, "ar_table_struct", "", opt),

		f(&l.Symbols.LastID, "rb_symbols_t", "last_id", opt),
		f(&l.Symbols.NextID, "rb_symbols_t", "next_id", opt),
		f(&l.Symbols.IDs, "rb_symbols_t", "ids", req),

		f(&l.VM.MainRactor, "rb_vm_struct", "ractor.main_ractor", req),
		f(&l.VM.MainThread, "rb_vm_struct", "ractor.main_thread", req),
		f(&l.VM.ObjSpace, "rb_vm_struct", "objspace|gc.objspace", req),

		f(&l.Ractor.ThreadsSet, "rb_ractor_struct", "threads.set", req),
		f(&l.Ractor.RunningEC, "rb_ractor_struct", "threads.running_ec", req),
		f(&l.Ractor.MainThread, "rb_ractor_struct", "threads.main", req),
		f(&l.Ractor.GVLOwner, "rb_ractor_struct", "threads.gvl.owner|threads.sched.running", opt),

		f(&l.Thread.Self, "rb_thread_struct", "self", req),
		f(&l.Thread.VM, "rb_thread_struct", "vm", req),
		f(&l.Thread.EC, "rb_thread_struct", "ec", req),
		f(&l.Thread.ThreadID, "rb_thread_struct", "thread_id", opt),
		f(&l.Thread.NativeThread, "rb_thread_struct", "nt", opt),
		f(&l.Thread.LtNode, "rb_thread_struct", "lt_node", req),
		f(&l.Thread.LtNodeNext, "rb_thread_struct", "lt_node.next", req),
		f(&l.Thread.TID, "rb_thread_struct", "tid", opt),
		f(&l.Thread.Name, "rb_thread_struct", "name", req),
		f(&l.Thread.Ractor, "rb_thread_struct", "ractor", opt),
		f(&l.Thread.UnblockFunc, "rb_thread_struct", "unblock.func", opt),

		f(&l.NativeThread.ThreadID, "rb_native_thread", "thread_id", opt),
		f(&l.NativeThread.TID, "rb_native_thread", "tid", opt),

		f(&l.GC.Count, "rb_objspace", "profile.count", opt),
		f(&l.GC.LastMajorGC, "rb_objspace", "rgengc.last_major_gc", opt),
		f(&l.GC.MinorCount, "rb_objspace", "profile.minor_gc_count", opt),
		f(&l.GC.MajorCount, "rb_objspace", "profile.major_gc_count", opt),
		f(&l.GC.CompactCount, "rb_objspace", "profile.compact_count", opt),
		f(&l.GC.Mode.Offset, "rb_objspace", "flags.mode", opt),
		f(&l.GC.Compacting.Offset, "rb_objspace", "flags.during_compacting", opt),
		f(&l.GC.Running.Offset, "rb_objspace", "flags.during_gc", opt),

		// Read from Structs by resolveHeapPage and resolveAllocated, which
		// check them together; listed so that tables keep them.
		f(new(int64), "heap_page", "age_bits", opt),
		f(new(int64), "heap_page", "mark_bits", opt),
		f(new(int64), "heap_page", "wb_unprotected_bits", opt),
		f(new(int64), "heap_page", "free_slots", opt),
		f(new(int64), "heap_page", "freelist", opt),
		f(new(int64), "heap_page", "slot_size", opt),
		f(new(int64), "heap_page", "size_pool|heap", opt),
		f(new(int64), "heap_page_header", "page", opt),
		f(new(int64), "heap_page", "start", opt),
		f(new(int64), "heap_page", "total_slots", opt),
		f(new(int64), "rb_objspace", "heap_pages.sorted", opt),
		f(new(int64), "rb_objspace", "heap_pages.allocated_pages", opt),
		f(new(int64), "rb_objspace", "heap_pages.sorted->meta.size", opt),
		f(new(int64), "rb_objspace", "heap_pages.sorted->data", opt),
		f(new(int64), "rb_objspace", "total_allocated_objects", opt),
		f(new(int64), "rb_objspace", "size_pools|heaps", opt),
		f(new(int64), "rb_size_pool_struct", "", opt),
		f(new(int64), "rb_size_pool_struct", "total_allocated_objects", opt),
		f(new(int64), "rb_heap_struct", "", opt),
		f(new(int64), "rb_heap_struct", "total_allocated_objects", opt),
	}
}

// usedMembers is the set of "struct.member" (and "struct." for sizes) that
// fields reads; built-in tables keep exactly these.
func usedMembers() map[string]bool {
	var l Layout
	out := map[string]bool{"rb_method_definition_struct.type": true}
	for _, f := range l.fields() {
		for _, m := range strings.Split(f.member, "|") {
			out[f.strct+"."+m] = true
		}
	}
	return out
}

// requiredConstants must be present for a Layout to be usable.
var requiredConstants = []string{
	"ISEQ_TYPE_TOP", "ISEQ_TYPE_METHOD", "ISEQ_TYPE_BLOCK",
	"VM_FRAME_MAGIC_CFUNC", "VM_FRAME_MAGIC_MASK", "VM_FRAME_FLAG_FINISH", "VM_FRAME_FLAG_CFRAME",
	"VM_ENV_FLAG_LOCAL",
	"RUBY_T_MASK", "RUBY_T_STRING", "RUBY_T_ARRAY", "RUBY_T_CLASS", "RUBY_T_MODULE", "RUBY_T_ICLASS",
	"RUBY_T_IMEMO", "RUBY_FL_USHIFT", "RUBY_FL_SINGLETON", "RSTRING_NOEMBED", "RARRAY_EMBED_FLAG",
	"imemo_ment", "imemo_svar", "imemo_cref",
	"VM_METHOD_TYPE_ISEQ", "VM_METHOD_TYPE_CFUNC",
	"tLAST_OP_ID", "RUBY_ID_SCOPE_SHIFT", "ID_ENTRY_STR", "ID_ENTRY_SIZE",
	"RUBY_Qfalse", "RUBY_Qnil", "RUBY_IMMEDIATE_MASK",
}

// errLayoutLacks says structs were found but not every member the walker reads.
var errLayoutLacks = errors.New("ruby's structs differ from what rubyperf reads")

// resolveLayout turns raw structs and constants into a Layout. It fails, naming
// every missing piece, when a required field or constant is absent.
func resolveLayout(v Version, arch, source string, structs Structs, consts map[string]int64) (*Layout, error) {
	l := &Layout{Version: v, Arch: arch, Source: source, Structs: structs, Constants: consts}
	var missing []string
	for _, f := range l.fields() {
		*f.dst = -1
		sl, ok := structs[f.strct]
		if !ok {
			if !f.optional {
				missing = append(missing, "struct "+f.strct)
			}
			continue
		}
		if f.member == "" {
			*f.dst = sl.Size
			continue
		}
		var m Member
		ok = false
		for _, name := range strings.Split(f.member, "|") {
			if m, ok = sl.Members[name]; ok {
				break
			}
		}
		if !ok {
			if !f.optional {
				missing = append(missing, f.strct+"."+f.member)
			}
			continue
		}
		*f.dst = m.Offset
	}
	if sl, ok := structs["rb_method_definition_struct"]; ok {
		if m, ok := sl.Members["type"]; ok {
			l.MethodDefinition.Type = m
		} else {
			missing = append(missing, "rb_method_definition_struct.type")
		}
	}
	if sl, ok := structs["rb_shape"]; ok {
		l.Shape.ParentIDSize = sl.Members["parent_id"].Size
		l.Shape.NextIvIndexSize = sl.Members["next_iv_index"].Size
		if m, ok := sl.Members["next_field_index"]; ok {
			l.Shape.NextIvIndexSize = m.Size
		}
	}
	if sl, ok := structs["rb_iseq_constant_body"]; ok {
		l.IseqBody.FirstLinenoSize = sl.Members["location.first_lineno"].Size
	}
	l.Symbol.Type = -1
	if t, ok := consts["RUBY_T_SYMBOL"]; ok {
		l.Symbol.Type = t
	}
	l.Shape.Capacity = Member{Offset: -1}
	if sl, ok := structs["rb_shape"]; ok {
		if m, ok := sl.Members["capacity"]; ok && (m.Size == 2 || m.Size == 4) && m.BitSize == 0 {
			l.Shape.Capacity = m
		}
	}
	if sl, ok := structs["rb_objspace"]; ok {
		l.GC.Mode = sl.Members["flags.mode"]
		l.GC.Compacting = sl.Members["flags.during_compacting"]
		if m, ok := sl.Members["flags.during_gc"]; ok {
			l.GC.Running = m
		}
	}
	for _, c := range requiredConstants {
		if _, ok := consts[c]; !ok {
			missing = append(missing, "constant "+c)
		}
	}
	// Alternatives: one of each pair must exist.
	if l.String.Len < 0 && l.String.HeapLen < 0 {
		missing = append(missing, "RString.len or RString.as.heap.len")
	}
	if l.Class.Super < 0 && l.Class.ClassextSuper < 0 {
		missing = append(missing, "RClass.super or rb_classext_struct.super")
	}
	if l.Symbols.LastID < 0 && l.Symbols.NextID < 0 {
		missing = append(missing, "rb_symbols_t.last_id or next_id")
	}
	if l.Thread.ThreadID < 0 && l.Thread.NativeThread < 0 {
		missing = append(missing, "rb_thread_struct.thread_id or nt")
	}
	if l.Thread.TID < 0 && l.NativeThread.TID < 0 {
		missing = append(missing, "rb_thread_struct.tid or rb_native_thread.tid")
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("%w: layout from %s lacks %s", errLayoutLacks, source, strings.Join(missing, ", "))
	}
	_, hasEmbedMask := consts["RSTRING_EMBED_LEN_MASK"]
	_, hasHeapFlag := consts["ROBJECT_HEAP"]
	shapes := l.Shape.ParentID >= 0 && l.Shape.EdgeName >= 0 && l.Shape.Type >= 0 && l.Shape.Size > 0 &&
		(l.Shape.NextIvIndexSize == 2 || l.Shape.NextIvIndexSize == 4) &&
		(l.Shape.TreeShapeList >= 0 || l.Shape.VMShapeList >= 0)
	fieldsObject := l.Class.FieldsObj >= 0 && l.Fields.Embed >= 0 && l.Fields.Heap >= 0 && hasHeapFlag
	l.Capabilities = Capabilities{
		FirstLinenoFixnum:     l.IseqBody.FirstLinenoSize == 8,
		StringLenField:        l.String.Len >= 0,
		StringEmbedLenInFlags: l.String.Len < 0 && l.String.EmbedLen < 0 && hasEmbedMask,
		ClassextEmbedded:      l.Class.Ptr < 0,
		ClassPathField:        l.Class.ClassPath >= 0,
		NativeThreadStruct:    l.Thread.NativeThread >= 0,
		SymbolsNextID:         l.Symbols.NextID >= 0,
		// Behaviours of rb_profile_frames that no struct shows: see
		// vm_backtrace.c (cfunc frames since 3.0; the dummy bottom frame and
		// NULL-pc frames skipped since 3.2; the top frame's line is 0 when
		// jit_return is set in 3.3 and 3.4, when its pc is outside its iseq
		// from 4.0).
		CFuncFrames:          !v.Less(Version{3, 0, 0}),
		SkipDummyBottomFrame: !v.Less(Version{3, 2, 0}),
		TopJITFrameLineZero:  !v.Less(Version{3, 3, 0}) && v.Less(Version{4, 0, 0}) && l.ControlFrame.JITReturn >= 0,
		TopFramePCRangeCheck: !v.Less(Version{4, 0, 0}),
		ClassIvarsInShapes: l.Class.ClassextIvTbl < 0 && shapes &&
			(l.Shape.ClassextIvPtr >= 0 || fieldsObject),
		ClassFieldsObject: l.Shape.ClassextIvPtr < 0 && fieldsObject,
		ShapeListInVM:     l.Shape.TreeShapeList < 0 && l.Shape.VMShapeList >= 0,
		SuperInClassext:   l.Class.Super < 0 && l.Class.ClassextSuper >= 0,
		GCStamps:          hasGCStamps(l),
	}
	l.resolveHeapPage()
	l.resolveAllocated()
	l.resolveHeap()
	l.Capabilities.GCPhase = l.hasGCPhase()
	l.Capabilities.BlockingRegion = l.Thread.UnblockFunc >= 0 &&
		l.Structs["rb_thread_struct"].Members["unblock.func"].Size == 8
	return l, nil
}

// hasGCStamps: the layout has every piece a GC stamp needs, each plausible
// (8-byte counters, a bit-field phase of at most 2 bits and a 1-bit flag
// inside their words, the enumerators and flag bit present).
func hasGCStamps(l *Layout) bool {
	c := l.Constants
	_, none := c["gc_mode_none"]
	_, marking := c["gc_mode_marking"]
	promoted := c["RUBY_FL_PROMOTED"]
	bits := func(m Member, max int64) bool {
		return m.Offset >= 0 && m.BitSize > 0 && m.BitSize <= max && m.BitOffset >= 0 && m.BitOffset+m.BitSize <= 32
	}
	return l.VM.ObjSpace >= 0 && l.GC.Count >= 0 && l.GC.LastMajorGC >= 0 && l.GC.MinorCount >= 0 && l.GC.MajorCount >= 0 &&
		l.Structs["rb_objspace"].Members["profile.count"].Size == 8 &&
		l.Structs["rb_objspace"].Members["rgengc.last_major_gc"].Size == 8 &&
		bits(l.GC.Mode, 2) && bits(l.GC.Compacting, 1) && l.GC.Mode.Offset == l.GC.Compacting.Offset &&
		none && marking && promoted != 0
}

// hasGCPhase: the layout has GC stamps (with the gc_mode_none and
// gc_mode_marking enumerators) and a 1-bit during_gc in the same 32-bit word
// as the mode, apart from its other bits. Sweeping and compacting are told by
// their enumerators where the layout has them, else by during_compacting.
func (l *Layout) hasGCPhase() bool {
	r, m, k := l.GC.Running, l.GC.Mode, l.GC.Compacting
	return l.Capabilities.GCStamps && r.Offset == m.Offset && r.BitSize == 1 && r.BitOffset >= 0 &&
		r.BitOffset < 32 && !overlapBits(r, m) && !overlapBits(r, k)
}

// GCSpan is the part of the objspace holding the GC fields a stamp reads,
// [lo, hi) in bytes from its start, lo 8-aligned: the count, the last major
// GC and the 32-bit word of the flags (mode and during_compacting share it).
func (l *Layout) GCSpan() (lo, hi int64) {
	g := &l.GC
	return min(g.Count, g.LastMajorGC, g.Mode.Offset) &^ 7, max(g.Count+8, g.LastMajorGC+8, g.Mode.Offset+4)
}

// AgeBits returns where an object's flags hold its age (how many GC
// markings it survived, up to old): the mask of RUBY_FL_PROMOTED0 and
// RUBY_FL_PROMOTED1, which RUBY_FL_PROMOTED spans up to Ruby 3.2, and its
// shift. ok is false where RUBY_FL_PROMOTED is one bit (3.3 and later keep
// ages in a bitmap of the heap page) or absent.
func (l *Layout) AgeBits() (mask uint64, shift int, ok bool) {
	mask = uint64(l.Constants["RUBY_FL_PROMOTED"])
	shift = bits.TrailingZeros64(mask)
	if mask == 0 || mask>>shift != 3 {
		return 0, 0, false
	}
	return mask, shift, true
}

// resolveAllocated finds where the GC counts allocations (Layout.Allocated).
func (l *Layout) resolveAllocated() {
	a := &l.Allocated
	a.Counter, a.Pools, a.PagePool = -1, -1, -1
	for _, name := range []string{"heap", "size_pool"} {
		if m, ok := l.Structs["heap_page"].Members[name]; ok && m.Size == 8 && m.BitSize == 0 {
			a.PagePool = m.Offset
			break
		}
	}
	objspace := l.Structs["rb_objspace"].Members
	if m, ok := objspace["total_allocated_objects"]; ok && m.Size == 8 && m.BitSize == 0 {
		a.Counter = m.Offset
		return
	}
	for _, pool := range []struct{ array, elem string }{{"size_pools", "rb_size_pool_struct"}, {"heaps", "rb_heap_struct"}} {
		arr, ok := objspace[pool.array]
		elem := l.Structs[pool.elem]
		counter, okC := elem.Members["total_allocated_objects"]
		if !ok || !okC || counter.Size != 8 || elem.Size <= 0 || arr.Size <= 0 || arr.Size%elem.Size != 0 ||
			arr.Size/elem.Size > 64 || counter.Offset+8 > elem.Size {
			continue
		}
		a.Pools, a.Count, a.Stride, a.PoolCounter = arr.Offset, arr.Size/elem.Size, elem.Size, counter.Offset
		return
	}
}

// resolveHeap finds where the GC lists its heap pages (Layout.Heap), when
// the layout has every piece, each of a plausible size: the pages as an
// array with its length beside it (up to 3.3) or as an rb_darray (3.4+).
func (l *Layout) resolveHeap() {
	h := &l.Heap
	h.Pages, h.Count, h.DarrayLen, h.DarrayData, h.Start = -1, -1, -1, -1, -1
	objspace, page := l.Structs["rb_objspace"].Members, l.Structs["heap_page"].Members
	sorted, okSorted := objspace["heap_pages.sorted"]
	start, okStart := page["start"]
	total, okTotal := page["total_slots"]
	slot, okSlot := page["slot_size"]
	if !okSorted || sorted.Size != 8 || !okStart || start.Size != 8 || !okTotal || total.Size != 2 ||
		total.BitSize != 0 || !okSlot || slot.Size != 2 || slot.BitSize != 0 {
		return
	}
	n, okLen := objspace["heap_pages.sorted->meta.size"]
	data, okData := objspace["heap_pages.sorted->data"]
	count, okCount := objspace["heap_pages.allocated_pages"]
	switch {
	case okLen && okData && n.Size == 8 && data.Offset >= n.Offset+8:
		h.Darray, h.DarrayLen, h.DarrayData = true, n.Offset, data.Offset
	case !okLen && okCount && count.Size == 8:
		h.Count = count.Offset
	default:
		return
	}
	h.Pages, h.Start, h.TotalSlots, h.SlotSize = sorted.Offset, start.Offset, total, slot
}

// resolveHeapPage finds the struct heap_page of an object's slot
// (Layout.HeapPage), when the layout has every piece, each plausible: a
// power-of-two alignment, one slot size that HEAP_PAGE_OBJ_LIMIT slots
// after the header imply; and in it, one bit a slot of mark_bits and of
// wb_unprotected_bits, and two of age_bits (HEAP_PAGE_BITMAP_LIMIT words
// of bits each), where present.
func (l *Layout) resolveHeapPage() {
	h := &l.HeapPage
	h.AgeBits, h.Page, h.MarkBits, h.WBUnprotectedBits = -1, -1, -1, -1
	members := l.Structs["heap_page"].Members
	header, okHeader := l.Structs["heap_page_header"]
	hp, okHP := header.Members["page"]
	align, limit, words := l.Constants["HEAP_PAGE_ALIGN"], l.Constants["HEAP_PAGE_OBJ_LIMIT"], l.Constants["HEAP_PAGE_BITMAP_LIMIT"]
	if !okHeader || !okHP || hp.Size != 8 || align <= 0 || align > 1<<24 || align&(align-1) != 0 ||
		limit <= 0 || words <= 0 || header.Size <= 0 || header.Size >= align {
		return
	}
	room := align - header.Size
	slot := room / limit
	if slot < 8 || room/slot != limit || room/(slot+1) == limit || (align/slot+63)/64 > words {
		return
	}
	h.Page, h.Align, h.SlotSize = hp.Offset, align, slot
	if m, ok := members["mark_bits"]; ok && m.Size == words*8 {
		h.MarkBits = m.Offset
	}
	if m, ok := members["wb_unprotected_bits"]; ok && m.Size == words*8 {
		h.WBUnprotectedBits = m.Offset
	}
	if m, ok := members["age_bits"]; ok && m.Size == words*8*ageBitsPerSlot {
		h.AgeBits, h.AgeBitsSize = m.Offset, m.Size
	}
}

// ageBitsPerSlot is the width of an age in a heap page's age_bits: enough
// for 0 to 3 (old), which the flags held in two bits before 3.3.
const ageBitsPerSlot = 2

// AgesInPages says whether the layout finds an object's age in its heap
// page (Layout.HeapPage).
func (l *Layout) AgesInPages() bool { return l.HeapPage.AgeBits >= 0 && l.HeapPage.Page >= 0 }

// WBUnprotectedInPages says whether the layout finds in an object's heap
// page whether it lacks write barriers (Layout.HeapPage).
func (l *Layout) WBUnprotectedInPages() bool {
	return l.HeapPage.WBUnprotectedBits >= 0 && l.HeapPage.Page >= 0
}

// MarksInPages says whether the layout finds an object's mark bit in its
// heap page (Layout.HeapPage).
func (l *Layout) MarksInPages() bool { return l.HeapPage.MarkBits >= 0 && l.HeapPage.Page >= 0 }
