/*
 * rubyperf_profiler_state: request labels published the way the
 * ruby-profiler gem publishes them, for tests of rubyperf's label reading.
 * It is written here from the gem's documented public interface (its BPF
 * integration guide), so the tests need neither the gem nor the network.
 *
 * What a reader outside the process sees:
 *
 *   ruby_profiler_state: a thread-local pointer (dynamic symbol, STT_TLS,
 *   default visibility) to the running fiber's state, NULL when that fiber
 *   has none. It is set on every fiber switch and whenever the running
 *   fiber's state changes.
 *
 *   struct Ruby_Profiler_State: size (occupied pairs), capacity (a power of
 *   two), then capacity pairs {ID key; VALUE value}, key 0 meaning empty.
 *   Key K sits at the first slot from K & (capacity - 1) on, probing
 *   linearly with wrap-around. Here capacity is at least twice size, so a
 *   probe always meets an empty slot; the gem fills tables completely, so
 *   readers must bound their probes by capacity anyway.
 *
 * The Ruby API:
 *
 *   RubyperfProfilerState.with(request_id: "r42", endpoint: :users) { ... }
 *     runs the block with the pairs merged into the fiber's state, and puts
 *     the previous state back when the block exits, however it exits.
 *   RubyperfProfilerState.current    the fiber's pairs, a Hash
 *   RubyperfProfilerState.published  the pairs the thread-local pointer shows
 *     a reader (decoded from the published structure), or nil when NULL
 *   RubyperfProfilerState.layout     [address of this thread's
 *     ruby_profiler_state, the state's address, size, capacity]
 *   RubyperfProfilerState.id_of(sym) the ID a reader finds as the key
 *
 * A state is immutable: a change makes a new one. A new fiber starts with
 * none (as with the gem: states are per fiber, not inherited).
 */
#include <ruby.h>
#include <ruby/debug.h>

struct Ruby_Profiler_Pair {
    ID key;
    VALUE value;
};

struct Ruby_Profiler_State {
    size_t size;
    size_t capacity;
    struct Ruby_Profiler_Pair pairs[];
};

/*
 * The published pointer. Default visibility, so that it is in .dynsym even
 * when a Ruby's flags hide symbols; the TLS model is the compiler's default
 * for a shared object (global-dynamic), as the gem's is: the variable lives
 * in the module's dynamically allocated TLS block of each thread.
 */
__attribute__((visibility("default"))) _Thread_local struct Ruby_Profiler_State *ruby_profiler_state;

/* A bound on pairs per state, so that readers' probe loops stay small. */
#define MAX_PAIRS 64

static ID id_state; /* the fiber instance variable holding its state */
static VALUE cState;

static void
state_mark(void *ptr)
{
    struct Ruby_Profiler_State *s = ptr;
    if (!s) return;
    for (size_t i = 0; i < s->capacity; i++) {
        if (s->pairs[i].key) rb_gc_mark_movable(s->pairs[i].value);
    }
}

/* Compaction moves the values; the published pairs follow them. */
static void
state_compact(void *ptr)
{
    struct Ruby_Profiler_State *s = ptr;
    if (!s) return;
    for (size_t i = 0; i < s->capacity; i++) {
        if (s->pairs[i].key) s->pairs[i].value = rb_gc_location(s->pairs[i].value);
    }
}

static void
state_free(void *ptr)
{
    /* Never the published state of a live fiber (its fiber references it);
     * cleared anyway so a reader never follows a freed pointer. */
    if (ptr && ruby_profiler_state == ptr) ruby_profiler_state = NULL;
    ruby_xfree(ptr);
}

static size_t
state_memsize(const void *ptr)
{
    const struct Ruby_Profiler_State *s = ptr;
    return s ? sizeof(*s) + s->capacity * sizeof(s->pairs[0]) : 0;
}

static const rb_data_type_t state_type = {
    .wrap_struct_name = "RubyperfProfilerState::State",
    .function = {
        .dmark = state_mark,
        .dfree = state_free,
        .dsize = state_memsize,
        .dcompact = state_compact,
    },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static struct Ruby_Profiler_State *
state_of(VALUE obj)
{
    if (NIL_P(obj)) return NULL;
    return rb_check_typeddata(obj, &state_type);
}

/* The documented lookup: the slot holding key, or -1. */
static long
state_find(const struct Ruby_Profiler_State *s, ID key)
{
    size_t mask = s->capacity - 1;
    for (size_t i = 0; i < s->capacity; i++) {
        size_t pos = (key + i) & mask;
        if (s->pairs[pos].key == key) return (long)pos;
        if (s->pairs[pos].key == 0) return -1;
    }
    return -1;
}

static int
state_insert(VALUE sym, VALUE value, VALUE arg)
{
    struct Ruby_Profiler_State *s = (struct Ruby_Profiler_State *)arg;
    /* rb_sym2id makes a dynamic symbol permanent: the key never dangles. */
    ID key = rb_sym2id(sym);
    size_t mask = s->capacity - 1;
    for (size_t i = 0; i < s->capacity; i++) {
        size_t pos = (key + i) & mask;
        if (s->pairs[pos].key == 0) {
            s->pairs[pos].key = key;
            s->pairs[pos].value = value;
            s->size++;
            return ST_CONTINUE;
        }
    }
    rb_bug("rubyperf_profiler_state: no free slot"); /* capacity >= 2 * size */
}

/* A new state object holding the pairs of hash (Symbol => value). */
static VALUE
state_new(VALUE hash)
{
    size_t n = RHASH_SIZE(hash), capacity = 2;
    while (capacity < 2 * n) capacity *= 2; /* n <= MAX_PAIRS: bounded */
    VALUE obj = TypedData_Wrap_Struct(cState, &state_type, NULL);
    struct Ruby_Profiler_State *s = ruby_xcalloc(1, sizeof(*s) + capacity * sizeof(s->pairs[0]));
    s->capacity = capacity;
    DATA_PTR(obj) = s;
    rb_hash_foreach(hash, state_insert, (VALUE)s);
    return obj;
}

static VALUE
state_to_hash(const struct Ruby_Profiler_State *s)
{
    VALUE h = rb_hash_new();
    for (size_t i = 0; s && i < s->capacity; i++) {
        if (s->pairs[i].key) rb_hash_aset(h, ID2SYM(s->pairs[i].key), s->pairs[i].value);
    }
    return h;
}

/* Make obj (a state or nil) the fiber's state, and publish it if the fiber
 * is the one running. */
static void
set_state(VALUE fiber, VALUE obj)
{
    rb_ivar_set(fiber, id_state, obj);
    if (fiber == rb_fiber_current()) ruby_profiler_state = state_of(obj);
}

/* On every fiber switch, in the fiber switched to. */
static void
on_fiber_switch(rb_event_flag_t event, VALUE data, VALUE self, ID mid, VALUE klass)
{
    ruby_profiler_state = state_of(rb_ivar_get(rb_fiber_current(), id_state));
}

static int
merge_pair(VALUE key, VALUE value, VALUE merged)
{
    if (!SYMBOL_P(key)) rb_raise(rb_eTypeError, "label keys must be Symbols, not %"PRIsVALUE, rb_obj_class(key));
    rb_hash_aset(merged, key, value);
    return ST_CONTINUE;
}

struct restore {
    VALUE fiber;
    VALUE previous;
};

static VALUE
restore_state(VALUE arg)
{
    struct restore *r = (struct restore *)arg;
    set_state(r->fiber, r->previous);
    return Qnil;
}

static VALUE
ps_with(int argc, VALUE *argv, VALUE self)
{
    VALUE pairs;
    rb_scan_args(argc, argv, ":", &pairs);
    rb_need_block();
    if (NIL_P(pairs) || RHASH_SIZE(pairs) == 0) return rb_yield(Qnil);
    VALUE fiber = rb_fiber_current();
    /* previous stays referenced from this C frame, hence alive, until the
     * ensure puts it back. */
    VALUE previous = rb_ivar_get(fiber, id_state);
    VALUE merged = state_to_hash(state_of(previous));
    rb_hash_foreach(pairs, merge_pair, merged);
    if (RHASH_SIZE(merged) > MAX_PAIRS) rb_raise(rb_eArgError, "more than %d labels", MAX_PAIRS);
    set_state(fiber, state_new(merged));
    struct restore r = {fiber, previous};
    return rb_ensure(rb_yield, Qnil, restore_state, (VALUE)&r);
}

static VALUE
ps_current(VALUE self)
{
    return state_to_hash(state_of(rb_ivar_get(rb_fiber_current(), id_state)));
}

/* What a reader finds: checks the documented invariants, and that every
 * occupied slot is where the documented lookup looks for its key. */
static VALUE
ps_published(VALUE self)
{
    const struct Ruby_Profiler_State *s = ruby_profiler_state;
    if (!s) return Qnil;
    if (s->capacity == 0 || (s->capacity & (s->capacity - 1)) != 0) {
        rb_raise(rb_eRuntimeError, "capacity %zu is not a power of two", s->capacity);
    }
    size_t occupied = 0;
    for (size_t i = 0; i < s->capacity; i++) {
        if (!s->pairs[i].key) continue;
        occupied++;
        if (state_find(s, s->pairs[i].key) != (long)i) {
            rb_raise(rb_eRuntimeError, "slot %zu: its key is not found there by lookup", i);
        }
    }
    if (occupied != s->size) rb_raise(rb_eRuntimeError, "size %zu, %zu slots occupied", s->size, occupied);
    return state_to_hash(s);
}

static VALUE
ps_layout(VALUE self)
{
    const struct Ruby_Profiler_State *s = ruby_profiler_state;
    return rb_ary_new_from_args(4, ULL2NUM((uintptr_t)&ruby_profiler_state), ULL2NUM((uintptr_t)s),
                                SIZET2NUM(s ? s->size : 0), SIZET2NUM(s ? s->capacity : 0));
}

static VALUE
ps_id_of(VALUE self, VALUE sym)
{
    if (!SYMBOL_P(sym)) rb_raise(rb_eTypeError, "not a Symbol");
    return ULL2NUM(rb_sym2id(sym));
}

__attribute__((visibility("default"))) void
Init_rubyperf_profiler_state(void)
{
    VALUE m = rb_define_module("RubyperfProfilerState");
    cState = rb_define_class_under(m, "State", rb_cObject);
    rb_undef_alloc_func(cState);
    /* An @-name, so the object is an ordinary instance variable value; the
     * name keeps it out of the way of the application's own. */
    id_state = rb_intern("@__rubyperf_profiler_state");
    rb_define_singleton_method(m, "with", ps_with, -1);
    rb_define_singleton_method(m, "current", ps_current, 0);
    rb_define_singleton_method(m, "published", ps_published, 0);
    rb_define_singleton_method(m, "layout", ps_layout, 0);
    rb_define_singleton_method(m, "id_of", ps_id_of, 1);
    rb_add_event_hook(on_fiber_switch, RUBY_EVENT_FIBER_SWITCH, Qnil);
    ruby_profiler_state = state_of(rb_ivar_get(rb_fiber_current(), id_state));
}
