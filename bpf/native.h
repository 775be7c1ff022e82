// Native unwinding of the user stack with the unwind tables user space
// compiles (unwind_native).
// Included once, by ruby.bpf.c, after the maps and buffers it uses.

// Native unwinding. User space compiles each mapped object's call frame
// information into rows (native.Table, encoded by bpf.EncodeRows) in
// unwind_rows, and lists per process the executable mappings that have
// rows (proc_maps); the program walks the user stack with them from the
// interrupted registers, one frame per bpf_loop iteration.

// struct unwind_row: the rule from pc (an offset from the object's base,
// exec_map.base in the process) up to the next row's pc.
struct unwind_row {
	__u32 pc;
	__s16 cfa_off; // CFA = SP or FP (kind's ROW_CFA_*) + cfa_off
	__u8 kind;     // ROW_CFA_* | ROW_FP_* << 3
	__s8 fp_off;   // ROW_FP_AT_CFA: FP saved at CFA + 8 * fp_off; ROW_CFA_PLT: the threshold
};
// The return address is always at CFA - 8 (x86_64; arm64 tables whose rows
// say otherwise are encoded as ROW_CFA_UNSUPPORTED).
#define ROW_CFA_NONE 0        // no rule: the address has no call frame information
#define ROW_CFA_SP 1
#define ROW_CFA_FP 2
#define ROW_CFA_PLT 3         // SP + cfa_off, + 8 once (pc & 15) >= fp_off
#define ROW_CFA_OUTERMOST 4   // the thread's first frame
#define ROW_CFA_UNSUPPORTED 5 // a rule the rows do not model
#define ROW_CFA_SIGNAL 6      // a signal frame: the interrupted registers are in the ucontext at SP
// Where a signal frame's ucontext keeps them (x86_64 Linux, from its SP:
// uc_mcontext.gregs[REG_RBP], [REG_RSP], [REG_RIP]; native.SignalFrame*).
#define SIGNAL_FP (40 + 8 * 10)
#define SIGNAL_SP (40 + 8 * 15)
#define SIGNAL_PC (40 + 8 * 16)
#define ROW_CFA_MASK 7
#define ROW_FP_SAME (0 << 3)
#define ROW_FP_AT_CFA (1 << 3)
#define ROW_FP_UNKNOWN (2 << 3)
#define ROW_FP_MASK (3 << 3)

// Why a native walk stopped (payload_header.native_stop).
#define NATIVE_OFF 0         // not unwound: the process has no tables
#define NATIVE_OUTERMOST 1   // the thread's first frame: the stack is whole
#define NATIVE_NO_TABLE 2    // a pc in no mapping with rows (JIT code, no CFI)
#define NATIVE_NO_RULE 3     // no row for the pc
#define NATIVE_UNSUPPORTED 4 // the row's rule is not modelled
#define NATIVE_FP_UNKNOWN 5  // the CFA needs a frame pointer no rule kept
#define NATIVE_READ 6        // the stack could not be read
#define NATIVE_NOT_UP 7      // the next frame would not lie above
#define NATIVE_DEPTH 8       // MAX_NATIVE frames
#define NATIVE_NO_REGS 9     // the thread's user registers could not be read

// MAX_EXEC_MAPS bounds one process's mappings with rows; MAP_SEARCH and
// ROW_SEARCH the binary searches (2^MAP_SEARCH >= MAX_EXEC_MAPS; 2^ROW_SEARCH
// rows in one object).
#define MAX_EXEC_MAPS 256
#define MAP_SEARCH 8
#define ROW_SEARCH 24

struct exec_map {
	__u64 start, end; // [start, end) in the process
	__u64 base;       // the process address of the object's row pc 0
	__u32 rows;       // the object's first row in unwind_rows
	__u32 nrows;
	__u32 pages;      // the object's first entry in unwind_pages
	__u32 npages;     // 0: none (the rows are searched whole)
};

struct proc_maps {
	__u32 n;   // mappings, sorted by start, not overlapping
	__u32 gen; // changed by user space with the mappings: row_cache entries of another gen are stale
	struct exec_map maps[MAX_EXEC_MAPS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32); // tgid
	__type(value, struct proc_maps);
} proc_unwind SEC(".maps");

// unwind_rows: every object's rows, end to end; user space sets
// max_entries (its budget of rows).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE); // written by user space as memory
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_row);
} unwind_rows SEC(".maps");

// unwind_pages: for each object with rows, one struct row_page per
// 1 << ROW_PAGE_SHIFT bytes of its code: the indexes (from its first row)
// of the rows in force at that span's start and at the next span's. A
// search of the rows for an address then looks only between its span's
// two: a few rows a few cache lines apart, where a search of the whole
// object probed 17 to 20 rows across hundreds of KiB, each probe a cache
// miss once the target had run (1.5 to 2.5 µs a search on this machine).
// User space sets max_entries.
#define ROW_PAGE_SHIFT 10
struct row_page {
	__u32 first; // the row in force at the page's start
	__u32 last;  // the row in force at the next page's start, or the last
};
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE); // written by user space as memory
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct row_page);
} unwind_pages SEC(".maps");

// row_cache: per CPU, a direct-mapped cache of the rows found for an
// address: deep stacks return through the same few call sites again and
// again, and a slot costs next to nothing against two binary searches.
#define ROW_CACHE_SLOTS 4096
struct cached_row {
	__u64 addr; // the address looked up (a return address less 1)
	__u32 tgid, gen;
	struct unwind_row row;
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ROW_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct cached_row);
} row_cache SEC(".maps");

// refill_ustack reads the user stack from a little below addr into
// buf->ustack: USTACK_CHUNK bytes, fewer where the main thread's stack ends
// first. A read that faults (it reaches an unmapped or untouched page: a
// fiber's stack ends under the next one's guard page) is tried again from
// addr to its page's end. It returns 0 when addr's u64 is in buf->ustack.
static __always_inline long refill_ustack(struct sample_buf *buf, __u64 addr)
{
	buf->ustack_lo = ~0ULL;
	buf->ustack_hi = 0;
	if (addr < USTACK_BELOW)
		return -1;
	__u64 lo = addr - USTACK_BELOW, len = USTACK_CHUNK;
	__u64 end = buf->ustack_end;
	if (end > addr && end - lo < len)
		len = end - lo;
	asm volatile("" : "+r"(len));
	if (len >= USTACK_BELOW + 8 && len <= USTACK_CHUNK && !bpf_probe_read_user(buf->ustack, len, (void *)lo)) {
		buf->ustack_lo = lo;
		buf->ustack_hi = lo + len;
		return 0;
	}
	lo = addr;
	len = 4096 - (addr & 4095);
	if (end > addr && end - lo < len)
		len = end - lo;
	asm volatile("" : "+r"(len));
	if (len >= 8 && len <= USTACK_CHUNK && !bpf_probe_read_user(buf->ustack, len, (void *)lo)) {
		buf->ustack_lo = lo;
		buf->ustack_hi = lo + len;
		return 0;
	}
	return -1;
}

// read_ustack reads the user stack's u64 at addr, through buf->ustack.
static __always_inline long read_ustack(struct sample_buf *buf, __u64 addr, __u64 *out)
{
	if (addr < buf->ustack_lo || addr + 8 > buf->ustack_hi || addr + 8 < addr) {
		if (refill_ustack(buf, addr))
			return bpf_probe_read_user(out, sizeof(*out), (void *)addr);
	}
	__u64 off = addr - buf->ustack_lo;
	asm volatile("" : "+r"(off));
	*out = *(__u64 *)&buf->ustack[off & (USTACK_CHUNK - 1)];
	return 0;
}

// native_ctx is the state of one native walk: scalars only, for the global
// function native_frame takes it (map values are looked up there).
struct native_ctx {
	__u64 pc, sp, fp;
	__u32 tgid;
	__u32 gen;      // proc_maps.gen when the walk began
	__u32 fp_known;
	__u32 stop;    // NATIVE_*; 0 while walking
	__u32 nowrite; // the iteration that stopped wrote no frame
	__u32 ret;     // pc is a return address (not where the thread was)
};

// exec_map_of: the index in tgid's mappings of the one holding pc, or -1.
// A global function: verified once, on its own, not for every state of the
// walk that calls it.
__attribute__((noinline)) long exec_map_of(__u32 tgid, __u64 pc)
{
	struct proc_maps *pm = bpf_map_lookup_elem(&proc_unwind, &tgid);
	if (!pm)
		return -1;
	__u32 lo = 0, hi = pm->n;
	if (hi > MAX_EXEC_MAPS)
		hi = MAX_EXEC_MAPS;
	for (int i = 0; i < MAP_SEARCH + 1 && lo < hi; i++) {
		__u32 mid = (lo + hi) / 2;
		struct exec_map *m = &pm->maps[mid & (MAX_EXEC_MAPS - 1)];
		if (pc < m->start)
			hi = mid;
		else if (pc >= m->end)
			lo = mid + 1;
		else
			return mid & (MAX_EXEC_MAPS - 1);
	}
	return -1;
}

// row_of: the index in unwind_rows of the last of an object's rows (nrows
// from first) at or below rel, or -1; its page entries are npages from
// pages in unwind_pages. A global function, as exec_map_of.
__attribute__((noinline)) long row_of(__u32 first, __u32 nrows, __u32 pages, __u32 npages, __u32 rel)
{
	__u32 lo = 0, n = nrows;
	if (n == 0 || n > (1 << ROW_SEARCH))
		return -1;
	__u32 page = rel >> ROW_PAGE_SHIFT;
	if (page < npages) {
		__u32 k = pages + page;
		struct row_page *p = bpf_map_lookup_elem(&unwind_pages, &k);
		// rel's row is among those from the one in force at its page's
		// start to the one in force at the next page's. (The entries are
		// user space's: a bad one narrows nothing.)
		if (p && p->first <= p->last && p->last < nrows) {
			lo = p->first;
			n = p->last - p->first + 1;
		}
	}
	__u32 lk = first + lo;
	struct unwind_row *r = bpf_map_lookup_elem(&unwind_rows, &lk);
	if (!r || r->pc > rel)
		return -1;
	// Invariant: row first + lo is at or below rel, every row from
	// first + lo + n on above it.
	for (int i = 0; i < ROW_SEARCH && n > 1; i++) {
		__u32 half = n / 2;
		__u32 idx = first + lo + half;
		r = bpf_map_lookup_elem(&unwind_rows, &idx);
		if (!r)
			return -1;
		if (r->pc <= rel) {
			lo += half;
			n -= half;
		} else {
			n = half;
		}
	}
	return first + lo;
}

// JIT code (an anonymous executable mapping, listed with no rows) has no
// call frame information: its frame is stepped over by the nearest slot
// above its SP that holds a return address into code with rows, right
// after a call instruction those rows cover (native.Unwind's jitStep, which
// this mirrors; the call is recognised by its encoding, callEndsAt in
// native's tablewalk.go). JIT_SCAN bounds the slots searched.
#define JIT_SCAN 64

// call_ends_at: the code before v ends with a call instruction: e8
// rel32, or ff /2 (through a register, or memory through a register, SIB,
// disp8 or disp32, or rip+disp32), whatever prefixes it has. A global
// function, verified once.
__attribute__((noinline)) int call_ends_at(__u64 v)
{
	__u8 b[8];
	if (v < 8 || bpf_probe_read_user(b, sizeof(b), (void *)(v - 8)))
		return 0;
	if (b[3] == 0xe8)
		return 1;
	// ff /2 ends at the end when its modrm and SIB say it is as long as the
	// bytes from ff on.
	for (int n = 2; n <= 7; n++) {
		__u8 ff = b[(8 - n) & 7], modrm = b[(9 - n) & 7];
		if (ff != 0xff || (modrm & 0x38) != 0x10)
			continue;
		__u8 mod = modrm >> 6, rm = modrm & 7;
		int len = 2; // ff modrm
		if (mod != 3 && rm == 4) {
			len++; // a SIB byte
			if (n < 3)
				continue;
			if (mod == 0 && (b[(10 - n) & 7] & 7) == 5)
				len += 4; // no base: disp32
		}
		if (mod == 1)
			len += 1;
		else if (mod == 2 || (mod == 0 && rm == 5))
			len += 4;
		if (len == n) // (a prefix before ff changes nothing of where it ends)
			return 1;
	}
	return 0;
}

// jit_ctx is the state of one search for a JIT frame's return address.
struct jit_ctx {
	__u64 sp;
	__u32 tgid;
	__s32 found; // the slot, or -1
};

// jit_slot checks slot i above a JIT frame's sp: a bpf_loop callback.
static long jit_slot(__u32 i, void *arg)
{
	struct jit_ctx *j = arg;
	__u64 v;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)(j->sp + 8 * (__u64)i)))
		return 1;
	long mi = exec_map_of(j->tgid, v);
	if (mi < 0)
		return 0;
	__u32 tgid = j->tgid;
	struct proc_maps *pm = bpf_map_lookup_elem(&proc_unwind, &tgid);
	if (!pm)
		return 1;
	struct exec_map *m = &pm->maps[mi & (MAX_EXEC_MAPS - 1)];
	if (m->nrows == 0 || v - 1 < m->base || v - 1 - m->base > 0xffffffffULL)
		return 0;
	long ri = row_of(m->rows, m->nrows, m->pages, m->npages, (__u32)(v - 1 - m->base));
	__u32 rk = ri;
	struct unwind_row *r = ri < 0 ? NULL : bpf_map_lookup_elem(&unwind_rows, &rk);
	if (!r || (r->kind & ROW_CFA_MASK) == ROW_CFA_NONE || !call_ends_at(v))
		return 0;
	j->found = i;
	return 1;
}

// jit_return: the slot (counted in 8 bytes from sp) of the first value
// above a JIT frame's sp that is a return address into code with rows, or
// -1.
static __always_inline long jit_return(__u32 tgid, __u64 sp)
{
	struct jit_ctx j = {.sp = sp, .tgid = tgid, .found = -1};
	bpf_loop(JIT_SCAN, jit_slot, &j, 0);
	return j.found;
}

// native_frame unwinds frame i. A global function, verified once: inlined
// into the bpf_loop callback, its branches multiplied the states the
// verifier followed from one iteration to the next (half a second to load).
__attribute__((noinline)) long native_frame(struct native_ctx *n, struct sample_buf *buf, __u32 i)
{
	if (!n || !buf)
		return 1;
	if (i >= MAX_NATIVE || n->pc == 0) {
		n->stop = n->pc ? NATIVE_DEPTH : NATIVE_OUTERMOST;
		n->nowrite = 1;
		return 1;
	}
	__u64 slot = i;
	// Keep the compiler from dropping the mask it can prove redundant: the
	// verifier must see it on the register used.
	asm volatile("" : "+r"(slot));
	buf->natives[slot & (MAX_NATIVE - 1)] = n->pc;
	// A return address points after its call: look up the call.
	__u64 addr = n->pc - (n->ret ? 1 : 0);
	__u32 gen = n->gen;
	__u32 ck = ((addr ^ n->tgid) * 0x9E3779B97F4A7C15ULL) >> 52; // 12 bits
	ck &= ROW_CACHE_SLOTS - 1;
	struct cached_row *c = bpf_map_lookup_elem(&row_cache, &ck);
	struct unwind_row *r;
	if (c && c->addr == addr && c->tgid == n->tgid && c->gen == gen) {
		r = &c->row;
	} else {
		long mi = exec_map_of(n->tgid, n->pc);
		__u32 tgid = n->tgid;
		struct proc_maps *pm = mi < 0 ? NULL : bpf_map_lookup_elem(&proc_unwind, &tgid);
		if (!pm) {
			n->stop = NATIVE_NO_TABLE;
			return 1;
		}
		struct exec_map *m = &pm->maps[mi & (MAX_EXEC_MAPS - 1)];
		if (m->nrows == 0) { // JIT code
			long slot = jit_return(n->tgid, n->sp);
			if (slot < 0 || slot >= JIT_SCAN) {
				n->stop = NATIVE_NO_TABLE;
				return 1;
			}
			__u64 at = n->sp + 8 * slot, ra, fp;
			if (read_ustack(buf, at, &ra)) {
				n->stop = NATIVE_READ;
				return 1;
			}
			// A JIT that keeps a frame pointer saved its caller's below
			// the return address, and pointed FP there.
			if (n->fp_known && slot > 0 && n->fp == at - 8) {
				n->fp_known = !read_ustack(buf, at - 8, &fp);
				n->fp = fp;
			}
			n->sp = at + 8;
			n->pc = ra;
			n->ret = 1;
			return 0;
		}
		__u64 rel = addr - m->base;
		if (addr < m->base || rel > 0xffffffffULL) {
			n->stop = NATIVE_NO_RULE;
			return 1;
		}
		long ri = row_of(m->rows, m->nrows, m->pages, m->npages, (__u32)rel);
		__u32 rk = ri;
		r = ri < 0 ? NULL : bpf_map_lookup_elem(&unwind_rows, &rk);
		if (!r) {
			n->stop = NATIVE_NO_RULE;
			return 1;
		}
		if (c) {
			c->addr = addr;
			c->tgid = n->tgid;
			c->gen = gen;
			c->row = *r;
			r = &c->row;
		}
	}
	__u64 cfa;
	switch (r->kind & ROW_CFA_MASK) {
	case ROW_CFA_SP:
		cfa = n->sp + r->cfa_off;
		break;
	case ROW_CFA_FP:
		if (!n->fp_known) {
			n->stop = NATIVE_FP_UNKNOWN;
			return 1;
		}
		cfa = n->fp + r->cfa_off;
		break;
	case ROW_CFA_PLT:
		cfa = n->sp + r->cfa_off + ((n->pc & 15) >= (__u64)r->fp_off ? 8 : 0);
		break;
	case ROW_CFA_OUTERMOST:
		n->stop = NATIVE_OUTERMOST;
		return 1;
	case ROW_CFA_SIGNAL: {
		__u64 sp, pc, fp;
		if (read_ustack(buf, n->sp + SIGNAL_SP, &sp) || read_ustack(buf, n->sp + SIGNAL_PC, &pc)) {
			n->stop = NATIVE_READ;
			return 1;
		}
		n->fp_known = !read_ustack(buf, n->sp + SIGNAL_FP, &fp);
		n->fp = fp;
		n->sp = sp;
		n->pc = pc;
		n->ret = 0; // where the signal interrupted the thread
		return 0;
	}
	case ROW_CFA_NONE:
		n->stop = NATIVE_NO_RULE;
		return 1;
	default:
		n->stop = NATIVE_UNSUPPORTED;
		return 1;
	}
	if (i > 0 && cfa <= n->sp) {
		n->stop = NATIVE_NOT_UP;
		return 1;
	}
	__u64 ra, fp;
	__u8 kind = r->kind;
	__s64 fp_off = r->fp_off;
	if (read_ustack(buf, cfa - 8, &ra)) {
		n->stop = NATIVE_READ;
		return 1;
	}
	switch (kind & ROW_FP_MASK) {
	case ROW_FP_AT_CFA:
		n->fp_known = !read_ustack(buf, cfa + 8 * fp_off, &fp);
		n->fp = fp;
		break;
	case ROW_FP_UNKNOWN:
		n->fp_known = 0;
		break;
	}
	n->sp = cfa;
	n->pc = ra;
	n->ret = 1;
	return 0;
}

// native_step unwinds one frame: a bpf_loop callback, frame i written by
// iteration i.
// native_loop is a walk's bpf_loop context: its state, and the sample's
// buffer (a map value, which the global function takes as an argument).
struct native_loop {
	struct native_ctx n;
	struct sample_buf *buf;
};

static long native_step(__u32 i, void *arg)
{
	struct native_loop *l = arg;
	// (The verifier wants a callback's return value proven 0 or 1.)
	return native_frame(&l->n, l->buf, i) ? 1 : 0;
}

// unwind_native walks the current task's user stack into buf->natives;
// it returns how many frames it wrote and sets buf->h.native_stop.
static __always_inline __u32 unwind_native(struct sample_buf *buf, __u32 tgid)
{
	struct proc_maps *pm = bpf_map_lookup_elem(&proc_unwind, &tgid);
	if (!pm)
		return 0;
	void *regs = (void *)bpf_task_pt_regs(bpf_get_current_task_btf());
	struct native_loop l = {.n = {.gen = pm->gen, .fp_known = 1, .tgid = tgid}, .buf = buf};
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	buf->ustack_end = BPF_CORE_READ(task, mm, start_stack);
	struct native_ctx *n = &l.n;
	if (!regs) {
		buf->h.native_stop = NATIVE_NO_REGS;
		return 0;
	}
#if defined(__TARGET_ARCH_x86)
	n->pc = BPF_CORE_READ((struct pt_regs *)regs, ip);
	n->sp = BPF_CORE_READ((struct pt_regs *)regs, sp);
	n->fp = BPF_CORE_READ((struct pt_regs *)regs, bp);
#elif defined(__TARGET_ARCH_arm64)
	// struct user_pt_regs (uapi): regs[31], sp, pc, pstate; x29 is the
	// frame pointer. (The return address in x30 is not modelled yet.)
	__u64 r[33];
	if (bpf_probe_read_kernel(r, sizeof(r), regs)) {
		buf->h.native_stop = NATIVE_NO_REGS;
		return 0;
	}
	n->fp = r[29];
	n->sp = r[31];
	n->pc = r[32];
#endif
	long got = bpf_loop(MAX_NATIVE + 1, native_step, &l, 0);
	if (got > 0 && n->nowrite)
		got--;
	if (got < 0)
		got = 0;
	if (got > MAX_NATIVE)
		got = MAX_NATIVE;
	buf->h.native_stop = n->stop ? n->stop : NATIVE_DEPTH;
	return got;
}
