/* A tiny stand-in for libruby, the seed of the ELF/DWARF fuzzers and a fixture
 * for unit tests. Regenerate with ./fakeruby.sh (gcc). */
typedef unsigned long VALUE;
const char ruby_version[] = "3.3.8";

struct rb_control_frame_struct {
	const VALUE *pc;
	VALUE *sp;
	const void *iseq;
	VALUE self;
	const VALUE *ep;
	const void *block_code;
	void *jit_return;
};

struct rb_thread_struct { void *lt_node[2]; VALUE self; void *ractor; void *vm; void *nt; void *ec; };

typedef struct rb_execution_context_struct {
	VALUE *vm_stack;
	unsigned long vm_stack_size;
	struct rb_control_frame_struct *cfp;
	void *tag;
	unsigned int interrupt_flag, interrupt_mask;
	void *fiber_ptr;
	struct rb_thread_struct *thread_ptr;
} rb_execution_context_t;

struct rb_method_definition_struct {
	unsigned int type : 4;
	unsigned int iseq_overload : 1;
	int alias_count : 27;
	int complemented_count : 28;
	union { struct { const void *iseqptr; void *cref; } iseq; struct { VALUE (*func)(void); int argc; } cfunc; } body;
	VALUE original_id;
};

enum ruby_value_type { RUBY_T_NONE = 0, RUBY_T_STRING = 5, RUBY_T_MASK = 0x1f };

__thread rb_execution_context_t *ruby_current_ec;

VALUE rb_thread_current(void) { return ruby_current_ec->thread_ptr->self; }
int use_def(struct rb_method_definition_struct *d, enum ruby_value_type t) { return d->type + t; }
