/* rb_during_gc in the shapes compilers give it, for the unit tests of the
 * disassembly of flags.during_gc (duringGCShapes in disasm_gc_test.go): Ruby
 * 3.3's rb_objspace flags (during_gc is bit 5 of the word at objspace+16)
 * behind the VM pointer, vm->objspace at 0x518. Built by Debian bookworm's
 * gcc 12.2 and clang 14 with -fPIC -fcf-protection -shared and
 *
 *	gcc -O2, gcc -Os, clang-14 -O2        the inline function
 *	gcc -O2 -DOUT_OF_LINE, clang-14 -O2 -DOUT_OF_LINE    a tail call
 *	clang-14 -O1 -DOUT_OF_LINE            a call, which is not followed
 */
#include <stddef.h>

struct rb_objspace {
	size_t limit, increase;
	struct {
		unsigned int mode : 2;
		unsigned int immediate_sweep : 1;
		unsigned int dont_gc : 1;
		unsigned int dont_incremental : 1;
		unsigned int during_gc : 1;
		unsigned int during_compacting : 1;
		unsigned int gc_stressful : 1;
	} flags;
};

struct rb_vm_struct {
	char before[0x518];
	struct rb_objspace *objspace;
};

__attribute__((visibility("hidden"))) struct rb_vm_struct *ruby_current_vm_ptr;

#ifdef OUT_OF_LINE
/* 3.4+'s default GC, had the compiler not inlined it. */
__attribute__((noinline)) static int
rb_gc_impl_during_gc_p(struct rb_objspace *objspace)
{
	return objspace->flags.during_gc;
}

int
rb_during_gc(void)
{
	return rb_gc_impl_during_gc_p(ruby_current_vm_ptr->objspace);
}
#else
int
rb_during_gc(void)
{
	struct rb_vm_struct *vm = ruby_current_vm_ptr;
	return vm ? vm->objspace->flags.during_gc : 0;
}
#endif
