package rubybuild

import "sort"

// Structs maps a C struct name, as Ruby's source spells it, to its layout.
// It is the raw material a Layout is resolved from, whether it came from DWARF
// or from a built-in table.
type Structs map[string]StructLayout

// StructLayout is one struct's size and members. Members of embedded structs
// and unions have dotted names ("location.pathobj", "body.iseq.iseqptr").
type StructLayout struct {
	Size    int64
	Members map[string]Member
}

// Member is where a field lives inside its struct.
type Member struct {
	Offset    int64 // bytes from the start of the outermost struct
	Size      int64 // bytes; for a bit-field, the size of its storage unit
	BitOffset int64 // for a bit-field: bits from Offset (little-endian numbering)
	BitSize   int64 // for a bit-field: its width; 0 otherwise
}

// A member named after "->" ("heap_pages.sorted->meta.size") is one of the
// anonymous struct a pointer member points to (rb_darray(T)): its Offset is
// from that struct's start, not the outer struct's.

// Names returns the struct names in order.
func (s Structs) Names() []string {
	out := make([]string, 0, len(s))
	for n := range s {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// MemberNames returns the member names of one struct in order of offset, then name.
func (sl StructLayout) MemberNames() []string {
	out := make([]string, 0, len(sl.Members))
	for n := range sl.Members {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := sl.Members[out[i]], sl.Members[out[j]]
		if a.Offset != b.Offset {
			return a.Offset < b.Offset
		}
		return out[i] < out[j]
	})
	return out
}

// wantedStructs are the CRuby structs whose layout rubyperf reads: the
// execution context and its frames, iseqs and their line tables, method
// entries, strings, arrays, classes, the symbol table, and the VM, ractor and
// thread structs that lead to every thread's execution context. Each entry is a
// struct tag, or the typedef of an anonymous struct (rb_symbols_t).
var wantedStructs = map[string]bool{
	"rb_execution_context_struct":     true,
	"rb_control_frame_struct":         true,
	"rb_iseq_struct":                  true,
	"rb_iseq_constant_body":           true,
	"rb_iseq_location_struct":         true,
	"iseq_insn_info_entry":            true,
	"rb_callable_method_entry_struct": true,
	"rb_method_definition_struct":     true,
	"vm_svar":                         true,
	"RBasic":                          true,
	"RString":                         true,
	"RArray":                          true,
	"RClass":                          true,
	"rb_classext_struct":              true,
	"st_table":                        true,
	"st_table_entry":                  true,
	"rb_symbols_t":                    true,
	"rb_vm_struct":                    true,
	"rb_ractor_struct":                true,
	"rb_thread_struct":                true,
	"rb_native_thread":                true, // 3.2+
	"succ_index_table":                true, // iseq.c: positions to line-table entries
	"succ_dict_block":                 true,
	"rb_shape":                        true, // 3.2+: object shapes
	"rb_shape_tree_t":                 true,
	"rb_fields":                       true, // 4.0+: the imemo holding a class's ivars
	"rb_objspace":                     true, // gc.c (gc/default/default.c 3.4+): GC counters and phase
	"RSymbol":                         true, // a dynamic Symbol: its ID (a request label's value)
	"RHash":                           true, // where a hash's table is (rubyperf heap: its memsize)
	"RObject":                         true, // where an object's ivars are beyond its slot (its memsize)
	"ar_table_struct":                 true, // hash.c (≤3.2), internal/hash.h: a hash's table of up to 8 pairs
	"heap_page":                       true, // gc.c: an object's age bits, from 3.3
	"heap_page_header":                true, // gc.c: at the start of a page's aligned body, its heap_page
	"rb_size_pool_struct":             true, // gc.c 3.2-3.3: a size pool, counting its allocations from 3.3
	"rb_heap_struct":                  true, // gc.c: a heap, counting its allocations from 3.4
}

// wantedConstants are enumerators of Ruby's C enums that the walker and
// symbolizer need: type tags, flag bits, frame magics, iseq and method types.
// They come from DWARF like offsets do, so no flag value is typed by hand.
var wantedConstants = map[string]bool{
	"tLAST_OP_ID": true, "RUBY_ID_SCOPE_SHIFT": true,
	"ISEQ_TYPE_TOP": true, "ISEQ_TYPE_METHOD": true, "ISEQ_TYPE_BLOCK": true, "ISEQ_TYPE_CLASS": true,
	"ISEQ_TYPE_RESCUE": true, "ISEQ_TYPE_ENSURE": true, "ISEQ_TYPE_EVAL": true, "ISEQ_TYPE_MAIN": true,
	"ISEQ_TYPE_PLAIN":       true,
	"VM_FRAME_MAGIC_METHOD": true, "VM_FRAME_MAGIC_BLOCK": true, "VM_FRAME_MAGIC_CLASS": true,
	"VM_FRAME_MAGIC_TOP": true, "VM_FRAME_MAGIC_CFUNC": true, "VM_FRAME_MAGIC_IFUNC": true,
	"VM_FRAME_MAGIC_EVAL": true, "VM_FRAME_MAGIC_RESCUE": true, "VM_FRAME_MAGIC_DUMMY": true,
	"VM_FRAME_MAGIC_MASK": true, "VM_FRAME_FLAG_FINISH": true, "VM_FRAME_FLAG_BMETHOD": true,
	"VM_FRAME_FLAG_CFRAME": true, "VM_FRAME_FLAG_LAMBDA": true, "VM_ENV_FLAG_LOCAL": true,
	"VM_ENV_FLAG_ESCAPED": true,
	"RUBY_T_MASK":         true, "RUBY_T_OBJECT": true, "RUBY_T_CLASS": true, "RUBY_T_MODULE": true,
	"RUBY_T_STRING": true, "RUBY_T_ARRAY": true, "RUBY_T_DATA": true, "RUBY_T_ICLASS": true,
	"RUBY_T_IMEMO": true, "RUBY_T_MOVED": true,
	"RUBY_FL_USHIFT": true, "RUBY_FL_SINGLETON": true, "RUBY_FL_USER0": true, "RUBY_FL_USER1": true,
	"RSTRING_NOEMBED": true, "RSTRING_EMBED_LEN_MASK": true, "RSTRING_EMBED_LEN_SHIFT": true,
	"RARRAY_EMBED_FLAG": true, "RARRAY_EMBED_LEN_MASK": true, "RARRAY_EMBED_LEN_SHIFT": true,
	"RMODULE_IS_REFINEMENT": true,
	"imemo_env":             true, "imemo_cref": true, "imemo_svar": true, "imemo_ment": true, "imemo_iseq": true,
	"VM_METHOD_TYPE_ISEQ": true, "VM_METHOD_TYPE_CFUNC": true, "VM_METHOD_TYPE_BMETHOD": true,
	"VM_METHOD_TYPE_ALIAS": true, "VM_METHOD_TYPE_REFINED": true,
	"ID_ENTRY_STR": true, "ID_ENTRY_SIZE": true,
	"RUBY_Qfalse": true, "RUBY_Qtrue": true, "RUBY_Qnil": true, "RUBY_Qundef": true,
	"RUBY_IMMEDIATE_MASK": true, "RUBY_FIXNUM_FLAG": true,
	"SHAPE_ROOT": true, "SHAPE_IVAR": true, "SHAPE_OBJ_TOO_COMPLEX": true,
	"SHAPE_ID_FLAGS_MASK": true, "SHAPE_ID_FL_TOO_COMPLEX": true, // 4.0+: flag bits inside a shape id
	"ROBJECT_HEAP": true, "ROBJECT_EMBED": true,
	// The GC's phase and an object's generation: whether a name read from
	// memory still holds for a sample (recording's frame spans).
	"gc_mode_none": true, "gc_mode_marking": true, "RUBY_FL_PROMOTED": true,
	// The GC's other phases, for a sample taken while it runs.
	"gc_mode_sweeping": true, "gc_mode_compacting": true,
	// Where an object's age bits are, from 3.3 (gc.c's anonymous enum of
	// heap page sizes).
	"HEAP_PAGE_ALIGN": true, "HEAP_PAGE_OBJ_LIMIT": true, "HEAP_PAGE_BITMAP_LIMIT": true,
	// A static Symbol as a VALUE (a request label's value).
	"RUBY_SYMBOL_FLAG": true, "RUBY_SPECIAL_SHIFT": true, "RUBY_T_SYMBOL": true,
	// The other types an allocated object may have (record --alloc names
	// an object without a class by its type).
	"RUBY_T_NONE": true, "RUBY_T_FLOAT": true, "RUBY_T_REGEXP": true, "RUBY_T_HASH": true,
	"RUBY_T_STRUCT": true, "RUBY_T_BIGNUM": true, "RUBY_T_FILE": true, "RUBY_T_MATCH": true,
	"RUBY_T_COMPLEX": true, "RUBY_T_RATIONAL": true, "RUBY_T_NODE": true, "RUBY_T_ZOMBIE": true,
	// What ObjectSpace.memsize_of counts beyond a string's or an array's
	// slot (rubyperf heap): the flags that say a buffer is shared
	// (RUBY_ELTS_SHARED, which STR_SHARED equals) or not the string's to
	// free (STR_NOFREE, FL_USER18 in every release), whether an object is
	// frozen, and a string's encoding, whose minimum character length is
	// the size of its terminator.
	"RUBY_ELTS_SHARED": true, "RUBY_FL_USER18": true, "RUBY_FL_FREEZE": true,
	// A shared root array (its capacity field counts its sharers): a
	// #define, made an enumerator by the tables' probe
	// (scripts/layout-probe.c); a DWARF build takes it from the table of
	// its release (sourceDefines).
	"RUBYPERF_RARRAY_SHARED_ROOT_FLAG": true,
	"RHASH_ST_TABLE_FLAG":              true, // a hash with an st_table, not an ar_table
	"RUBY_ENCODING_SHIFT":              true, "RUBY_ENCODING_INLINE_MAX": true,
	"RUBY_ENCINDEX_UTF_16BE": true, "RUBY_ENCINDEX_UTF_16LE": true, "RUBY_ENCINDEX_UTF_32BE": true,
	"RUBY_ENCINDEX_UTF_32LE": true, "RUBY_ENCINDEX_UTF_16": true, "RUBY_ENCINDEX_UTF_32": true,
}
