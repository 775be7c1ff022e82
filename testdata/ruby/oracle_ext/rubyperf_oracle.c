/*
 * rubyperf_oracle: Ruby's own answer for the calling thread's frames, for
 * testdata/ruby/oracle.rb on Rubies without Fiddle (a bundled gem from 4.0,
 * absent from offline builds). The tests compile it against the Ruby under
 * test (its headers and RbConfig flags) into a temporary directory.
 *
 *   RubyperfOracle.frames(max) -> [[full_label, path, line], ...], leaf first
 *   RubyperfOracle.object_at(address) -> the object at address
 *   RubyperfOracle.count_classes { ... } -> {class name => objects allocated in the block}
 *   RubyperfOracle.count_allocations { ... } -> {"objects" => N, "methods" => {label => [self, total]},
 *                                                "classes" => {class name => objects}}
 *
 * It returns what oracle.rb reads through Fiddle: rb_profile_frames with
 * rb_profile_frame_full_label and rb_profile_frame_path.
 */
#include <ruby.h>
#include <ruby/debug.h>
#include <ruby/st.h>

#define ORACLE_MAX_FRAMES 8192

static VALUE buffer[ORACLE_MAX_FRAMES];
static int lines[ORACLE_MAX_FRAMES];

static VALUE
oracle_frames(VALUE self, VALUE max)
{
    long limit = NUM2LONG(max);
    if (limit < 0 || limit > ORACLE_MAX_FRAMES) {
        rb_raise(rb_eArgError, "max must be in 0..%d", ORACLE_MAX_FRAMES);
    }
    int n = rb_profile_frames(0, (int)limit, buffer, lines);
    VALUE out = rb_ary_new_capa(n);
    for (int i = 0; i < n; i++) {
        VALUE label = rb_profile_frame_full_label(buffer[i]);
        VALUE path = rb_profile_frame_path(buffer[i]);
        rb_ary_push(out, rb_ary_new_from_args(3, label, path, INT2NUM(lines[i])));
    }
    return out;
}

/* Fiddle.dlunwrap: the object whose VALUE is address (from an "0x..." in a label). */
static VALUE
oracle_object_at(VALUE self, VALUE address)
{
    return (VALUE)NUM2ULL(address);
}

/*
 * Allocations by class, as the allocator's own event (RUBY_INTERNAL_EVENT_NEWOBJ,
 * which ObjectSpace's allocation tracing uses) sees every object built. The
 * hook may not allocate: it counts by klass, or by type for an object
 * without one (klass 0), and the names are made once the block is done.
 * The classes counted are kept alive (marked) until then: a singleton or
 * anonymous class may die first. The keeper's data pointer is not NULL: the
 * GC marks no data object whose pointer is.
 */
static st_table *class_counts; /* klass, or type tag << 1 | 1 for klass 0, to objects */

static int
mark_class(st_data_t key, st_data_t n, st_data_t arg)
{
    if (!(key & 1)) {
        rb_gc_mark((VALUE)key);
    }
    return ST_CONTINUE;
}

static void
mark_counts(void *p)
{
    if (class_counts) {
        st_foreach(class_counts, mark_class, 0);
    }
}

static const rb_data_type_t counts_type = {"rubyperf_oracle_counts", {mark_counts, NULL, NULL}, 0, 0, 0};

static void
count_newobj(VALUE tpval, void *data)
{
    VALUE obj = rb_tracearg_object(rb_tracearg_from_tracepoint(tpval));
    VALUE klass = RBASIC_CLASS(obj);
    int t = BUILTIN_TYPE(obj);
    /* An imemo's, a node's or an iclass's klass is no class of its own. */
    if (t == T_IMEMO || t == T_NODE || t == T_ICLASS) {
        klass = 0;
    }
    st_data_t key = klass ? (st_data_t)klass : ((st_data_t)t << 1 | 1);
    st_data_t n = 0;
    st_lookup(class_counts, key, &n);
    st_insert(class_counts, key, n + 1);
}

/* The name rubyperf gives a type: "T_STRING". */
static const char *
type_name(int t)
{
    switch (t) {
    case T_OBJECT: return "T_OBJECT";
    case T_CLASS: return "T_CLASS";
    case T_MODULE: return "T_MODULE";
    case T_FLOAT: return "T_FLOAT";
    case T_STRING: return "T_STRING";
    case T_REGEXP: return "T_REGEXP";
    case T_ARRAY: return "T_ARRAY";
    case T_HASH: return "T_HASH";
    case T_STRUCT: return "T_STRUCT";
    case T_BIGNUM: return "T_BIGNUM";
    case T_FILE: return "T_FILE";
    case T_DATA: return "T_DATA";
    case T_MATCH: return "T_MATCH";
    case T_COMPLEX: return "T_COMPLEX";
    case T_RATIONAL: return "T_RATIONAL";
    case T_SYMBOL: return "T_SYMBOL";
    case T_IMEMO: return "T_IMEMO";
    case T_NODE: return "T_NODE";
    case T_ICLASS: return "T_ICLASS";
    }
    return "T_OTHER";
}

static int
name_count(st_data_t key, st_data_t n, st_data_t out)
{
    VALUE name;
    if (key & 1) {
        name = rb_sprintf("(%s)", type_name((int)(key >> 1)));
    } else {
        VALUE klass = (VALUE)key;
        if (FL_TEST(klass, FL_SINGLETON)) {
            name = rb_str_new_cstr("Class"); /* a class's own singleton: Class.new */
        } else {
            name = rb_class_path(klass);
        }
    }
    VALUE had = rb_hash_lookup2((VALUE)out, name, INT2FIX(0));
    rb_hash_aset((VALUE)out, name, SIZET2NUM(NUM2SIZET(had) + (size_t)n));
    return ST_CONTINUE;
}

static VALUE
oracle_count_classes(VALUE self)
{
    if (class_counts) {
        rb_raise(rb_eRuntimeError, "count_classes does not nest");
    }
    class_counts = st_init_numtable();
    VALUE keeper = TypedData_Wrap_Struct(0, &counts_type, &class_counts);
    VALUE tp = rb_tracepoint_new(0, RUBY_INTERNAL_EVENT_NEWOBJ, count_newobj, NULL);
    rb_tracepoint_enable(tp);
    int state = 0;
    rb_protect(rb_yield, Qnil, &state);
    rb_tracepoint_disable(tp);
    VALUE out = rb_hash_new();
    st_foreach(class_counts, name_count, (st_data_t)out);
    st_free_table(class_counts);
    class_counts = NULL;
    RB_GC_GUARD(keeper);
    if (state) {
        rb_jump_tag(state);
    }
    return out;
}

/*
 * Allocations by method, as stackprof's :object mode at interval 1 counts
 * them (the same event, the same rb_profile_frames), for Rubies without
 * stackprof: each object counts as self for the leaf frame and as total
 * once for every distinct frame on its stack, however often recursion
 * repeats it. A frame's counts are found by its frame VALUE (an iseq or a
 * method entry), kept alive until the block is done; the labels are made
 * then. The hook may not allocate.
 */
struct method_counts {
    size_t self, total;
    size_t last; /* the allocation that last counted this frame's total */
};

static st_table *method_counts; /* frame VALUE to struct method_counts * */
static size_t allocations;
static VALUE alloc_frames[ORACLE_MAX_FRAMES];

static int
mark_frame(st_data_t key, st_data_t counts, st_data_t arg)
{
    rb_gc_mark((VALUE)key);
    return ST_CONTINUE;
}

static void
mark_method_counts(void *p)
{
    if (method_counts) {
        st_foreach(method_counts, mark_frame, 0);
    }
}

static const rb_data_type_t method_counts_type = {"rubyperf_oracle_method_counts", {mark_method_counts, NULL, NULL}, 0, 0, 0};

static void
count_allocation(VALUE tpval, void *data)
{
    count_newobj(tpval, data);
    allocations++;
    int n = rb_profile_frames(0, ORACLE_MAX_FRAMES, alloc_frames, NULL);
    for (int i = 0; i < n; i++) {
        st_data_t c = 0;
        if (!st_lookup(method_counts, (st_data_t)alloc_frames[i], &c)) {
            c = (st_data_t)calloc(1, sizeof(struct method_counts));
            if (!c) {
                continue; /* counted short: the hook may not raise */
            }
            st_insert(method_counts, (st_data_t)alloc_frames[i], c);
        }
        struct method_counts *m = (struct method_counts *)c;
        if (i == 0) {
            m->self++;
        }
        if (m->last != allocations) {
            m->last = allocations;
            m->total++;
        }
    }
}

/* name_method adds a frame's counts to out's entry for its label. */
static int
name_method(st_data_t key, st_data_t c, st_data_t out)
{
    struct method_counts *m = (struct method_counts *)c;
    VALUE label = rb_profile_frame_full_label((VALUE)key);
    if (NIL_P(label)) {
        label = rb_str_new_cstr("(unknown)");
    }
    VALUE had = rb_hash_lookup2((VALUE)out, label, Qnil);
    if (NIL_P(had)) {
        rb_hash_aset((VALUE)out, label, rb_ary_new_from_args(2, SIZET2NUM(m->self), SIZET2NUM(m->total)));
    } else {
        /* Two frames of one label (a method redefined): their totals may overlap; the sum is an upper bound. */
        rb_ary_store(had, 0, SIZET2NUM(NUM2SIZET(rb_ary_entry(had, 0)) + m->self));
        rb_ary_store(had, 1, SIZET2NUM(NUM2SIZET(rb_ary_entry(had, 1)) + m->total));
    }
    free(m);
    return ST_CONTINUE;
}

static VALUE
oracle_count_allocations(VALUE self)
{
    if (class_counts || method_counts) {
        rb_raise(rb_eRuntimeError, "count_allocations does not nest");
    }
    class_counts = st_init_numtable();
    method_counts = st_init_numtable();
    allocations = 0;
    VALUE keeper = TypedData_Wrap_Struct(0, &counts_type, &class_counts);
    VALUE frames_keeper = TypedData_Wrap_Struct(0, &method_counts_type, &method_counts);
    VALUE tp = rb_tracepoint_new(0, RUBY_INTERNAL_EVENT_NEWOBJ, count_allocation, NULL);
    rb_tracepoint_enable(tp);
    int state = 0;
    rb_protect(rb_yield, Qnil, &state);
    rb_tracepoint_disable(tp);
    VALUE classes = rb_hash_new();
    st_foreach(class_counts, name_count, (st_data_t)classes);
    st_free_table(class_counts);
    class_counts = NULL;
    VALUE methods = rb_hash_new();
    st_foreach(method_counts, name_method, (st_data_t)methods);
    st_free_table(method_counts);
    method_counts = NULL;
    RB_GC_GUARD(keeper);
    RB_GC_GUARD(frames_keeper);
    if (state) {
        rb_jump_tag(state);
    }
    VALUE out = rb_hash_new();
    rb_hash_aset(out, rb_str_new_cstr("objects"), SIZET2NUM(allocations));
    rb_hash_aset(out, rb_str_new_cstr("methods"), methods);
    rb_hash_aset(out, rb_str_new_cstr("classes"), classes);
    return out;
}

void
Init_rubyperf_oracle(void)
{
    VALUE m = rb_define_module("RubyperfOracle");
    rb_define_singleton_method(m, "frames", oracle_frames, 1);
    rb_define_singleton_method(m, "object_at", oracle_object_at, 1);
    rb_define_singleton_method(m, "count_classes", oracle_count_classes, 0);
    rb_define_singleton_method(m, "count_allocations", oracle_count_allocations, 0);
}
