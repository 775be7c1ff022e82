/* rb_sym2id in the shapes compilers give it, for the unit tests of the
 * disassembly of RSymbol.id (sym2idShapes in disasm_symbol_test.go): symbol.c
 * of Ruby 3.1-3.4 reduced to what the function does with its argument (the
 * static Symbol, the special-constant checks, the type check against
 * T_SYMBOL, the VM lock, dsymbol_check's reallocation, the registration of a
 * new ID), struct RSymbol as every 3.x has it: the ID at +32. Built by Debian
 * bookworm's gcc 12.2 and clang 14 with -fPIC -fcf-protection -shared and
 *
 *	gcc -O2, gcc -O1, gcc -Os, clang-14 -O2, clang-14 -Os
 *	gcc -O2 -DOUT_OF_LINE      the type check, then a tail call to the rest
 *	                           (gcc's rb_sym2id.part.0 in a static ruby)
 *	gcc -O0                    locals in %rbp's frame: not followed
 *	gcc -O2 -DTWO_MEMBERS      returns fstr when the ID is not assigned: ambiguous
 *	gcc -O2 -DT_SYMBOL=5       checks the type against RUBY_T_STRING's tag
 */
#include <stdint.h>

typedef uintptr_t VALUE;
typedef uintptr_t ID;

struct RBasic {
	VALUE flags;
	VALUE klass;
};

struct RSymbol {
	struct RBasic basic;
	long hashval;
	VALUE fstr;
	ID id;
};

#define RSYMBOL(s) ((struct RSymbol *)(s))
#ifndef T_SYMBOL
#define T_SYMBOL 0x14
#endif
#define T_MASK 0x1f
#define ID_SCOPE_MASK 0x0e
#define STATIC_SYM_P(x) (((VALUE)(x) & 0xff) == 0x0c)
#define SPECIAL_CONST_P(x) (((VALUE)(x) & 7) || !(VALUE)(x))
#define DYNAMIC_SYM_P(x) (!SPECIAL_CONST_P(x) && (RSYMBOL(x)->basic.flags & T_MASK) == T_SYMBOL)

extern void *ruby_single_main_ractor;
extern unsigned int last_id;
void rb_vm_lock_enter_body(unsigned int *);
void rb_vm_lock_leave_body(unsigned int *);
int rb_objspace_garbage_object_p(VALUE);
VALUE dsymbol_realloc(VALUE);
void set_id_entry(unsigned int, VALUE, VALUE);
void rb_raise(const char *, ...) __attribute__((noreturn));

#ifdef OUT_OF_LINE
__attribute__((noinline)) static
#else
static inline
#endif
ID
dynamic_sym2id(VALUE sym)
{
	ID id;
	unsigned int lev;
	if (!ruby_single_main_ractor) rb_vm_lock_enter_body(&lev);
	if (__builtin_expect(rb_objspace_garbage_object_p(sym), 0)) sym = dsymbol_realloc(sym);
	id = RSYMBOL(sym)->id;
	if (__builtin_expect(!(id & ~ID_SCOPE_MASK), 0)) {
#ifdef TWO_MEMBERS
		id = RSYMBOL(sym)->fstr;
#else
		VALUE fstr = RSYMBOL(sym)->fstr;
		unsigned int num = ++last_id;
		RSYMBOL(sym)->id = id |= (ID)num << 4;
		set_id_entry(num, fstr, sym);
#endif
	}
	if (!ruby_single_main_ractor) rb_vm_lock_leave_body(&lev);
	return id;
}

ID
rb_sym2id(VALUE sym)
{
	if (STATIC_SYM_P(sym)) {
		return sym >> 8;
	}
	else if (DYNAMIC_SYM_P(sym)) {
		return dynamic_sym2id(sym);
	}
	rb_raise("wrong argument type (expected Symbol)");
}
