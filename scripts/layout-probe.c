/*
 * layout-probe.c: makes the compiler describe, in DWARF, every struct and
 * enum of a configured CRuby source tree that rubyperf's Layout reads, without
 * building Ruby. scripts/gen-tables.sh compiles it inside the tree with Ruby's
 * own compiler flags plus -fno-eliminate-unused-debug-types (so every type the
 * headers declare is described, used or not), links it with `ld -r` to the
 * objects of the .c files that keep some structs private (iseq.c:
 * succ_index_table, succ_dict_block; st.c: st_table_entry; symbol.c:
 * enum id_entry_type, and rb_symbols_t from 4.0; gc.c: struct rb_objspace
 * and enum gc_mode, from 3.4 in gc/default/default.c, which gc.c includes;
 * hash.c: struct ar_table_struct up to 3.2),
 * and runs `rubyperf offsets --format go` on the result.
 *
 * No number is written here: offsets, sizes and enumerator values all come
 * from the compiler's DWARF. The only definition is ruby_version, spelled from
 * the tree's own version headers, which rubyperf reads to key the table.
 */

/* revision.h is generated from git; the probe needs no revision. */
#define RUBY_REVISION "layout-probe"

#include "ruby/ruby.h"
#include "ruby/st.h"
#include "internal.h"
#include "internal/class.h"
#include "internal/imemo.h"
#include "internal/string.h"
#include "internal/array.h"
#include "internal/hash.h"
#include "internal/vm.h"
#include "vm_core.h"
#include "iseq.h"
#include "method.h"
#include "id.h"
#include "symbol.h"
#include "encindex.h" /* the preserved encodings: a string terminator's size */
#if __has_include("ractor_core.h")
# include "ractor_core.h"
#endif
#if __has_include("shape.h")
# include "shape.h" /* 3.2+ */
#endif
#include "version.h"

#ifndef RUBY_VERSION
# define RUBY_VERSION STRINGIZE(RUBY_VERSION_MAJOR) "." STRINGIZE(RUBY_VERSION_MINOR) "." STRINGIZE(RUBY_VERSION_TEENY)
#endif

/* Flag bits Ruby defines only with #define, in its private sources: the
 * script copies each definition line from the tree's own source into
 * rubyperf-defines.h (scripts/gen-tables.sh source_defines), and an
 * enumerator here makes the compiler's value of it part of the DWARF. */
#if __has_include("rubyperf-defines.h")
# include "rubyperf-defines.h"
#endif
#ifdef RARRAY_SHARED_ROOT_FLAG
enum rubyperf_source_defines {
    RUBYPERF_RARRAY_SHARED_ROOT_FLAG = RARRAY_SHARED_ROOT_FLAG /* array.c (3.1), internal/array.h */
};
#endif

/* The version rubyperf keys the table with, as every libruby exports it. */
const char ruby_version[] = RUBY_VERSION;
