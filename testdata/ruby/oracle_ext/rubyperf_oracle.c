/*
 * rubyperf_oracle: Ruby's own answer for the calling thread's frames, for
 * testdata/ruby/oracle.rb on Rubies without Fiddle (a bundled gem from 4.0,
 * absent from offline builds). The tests compile it against the Ruby under
 * test (its headers and RbConfig flags) into a temporary directory.
 *
 *   RubyperfOracle.frames(max) -> [[full_label, path, line], ...], leaf first
 *   RubyperfOracle.object_at(address) -> the object at address
 *
 * It returns what oracle.rb reads through Fiddle: rb_profile_frames with
 * rb_profile_frame_full_label and rb_profile_frame_path.
 */
#include <ruby.h>
#include <ruby/debug.h>

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

void
Init_rubyperf_oracle(void)
{
    VALUE m = rb_define_module("RubyperfOracle");
    rb_define_singleton_method(m, "frames", oracle_frames, 1);
    rb_define_singleton_method(m, "object_at", oracle_object_at, 1);
}
