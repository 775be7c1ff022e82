// The Ruby stack walk: the control frames from ec->cfp, each frame's method
// entry found through its environments, and which frames user space has
// not named yet for the sample's GC interval (any_fresh).
// Included once, by ruby.bpf.c, after the maps and buffers it uses.

// walk_ctx is the state of one walk. It holds no counter: the verifier
// follows bpf_loop callbacks iteration by iteration on recent kernels, and a
// precise counter would keep their states from converging. Frame i is
// written by iteration i; bpf_loop's return value counts them.
struct walk_ctx {
	struct proc_config *cfg;
	struct sample_buf *buf;
	__u64 cfp, end;
	__u64 stack_lo, stack_hi; // the VM stack
	__u32 pid;
	__u32 chunk;   // frames in buf->cfps, from the last multiple of CFP_CHUNK
	__u32 stopped; // the last iteration wrote no frame
	__u32 top_jit; // the top frame's jit_return is set
	__u32 env_left; // a frame's environment chain was left to user space
};

// method_entry: v, the me_cref of an environment that is not local, if it
// is a method entry (imemo_ment; a define_method block's), else 0.
static __always_inline __u64 method_entry(struct proc_config *c, __u64 v)
{
	__u64 flags;
	if (v == 0 || v == c->qnil || (v & c->imm_mask))
		return 0;
	if (bpf_probe_read_user(&flags, sizeof(flags), (void *)v))
		return 0;
	if ((flags & c->t_mask) != c->t_imemo)
		return 0;
	if (((flags >> c->fl_ushift) & 0xf) != c->imemo_ment) // imemo_mask
		return 0;
	return v;
}

// read_env reads ep[-2], ep[-1] and ep[0] into env. An environment on the VM
// stack is served from buf->envs, refilled with the ENV_CHUNK bytes ending
// at it when it is not there; one that escaped to the heap is read alone.
static __always_inline long read_env(struct walk_ctx *w, __u64 ep, __u64 env[3])
{
	__u64 lo = ep - 16, hi = ep + 8;
	if (ep < 16 || (ep & 7))
		return -1;
	if (lo < w->stack_lo || hi > w->stack_hi)
		return bpf_probe_read_user(env, 3 * sizeof(__u64), (void *)lo);
	struct sample_buf *buf = w->buf;
	if (lo < buf->env_lo || hi > buf->env_hi) {
		__u64 start = w->stack_lo;
		if (hi - start > ENV_CHUNK)
			start = hi - ENV_CHUNK;
		__u64 size = hi - start;
		if (size < 3 * sizeof(__u64) || size > ENV_CHUNK ||
		    bpf_probe_read_user(buf->envs, size, (void *)start))
			return -1;
		buf->env_lo = start;
		buf->env_hi = hi;
	}
	// Both ends are 8-aligned and lo..hi lies inside the chunk; the masks
	// only prove that to the verifier.
	__u64 at = lo - buf->env_lo;
	__u8 *envs = buf->envs;
	env[0] = *(__u64 *)(envs + (at & (ENV_CHUNK - 8)));
	env[1] = *(__u64 *)(envs + ((at + 8) & (ENV_CHUNK - 8)));
	env[2] = *(__u64 *)(envs + ((at + 16) & (ENV_CHUNK - 8)));
	return 0;
}

static long walk_frame(__u32 i, void *data)
{
	struct walk_ctx *w = data;
	struct proc_config *c = w->cfg;
	__u64 cfp = w->cfp + (__u64)i * c->cfp_size;
	__u32 j = i % CFP_CHUNK;
	__u64 env[3]; // ep[-2] me_cref, ep[-1] specval, ep[0] flags

	if (i >= MAX_FRAMES || cfp >= w->end)
		goto stop;
	if (j == 0) {
		// Frames lie end to end up to the VM stack's end: read the next
		// CFP_CHUNK of them, never past the end.
		__u64 left = (w->end - cfp) / c->cfp_size;
		if (left > CFP_CHUNK)
			left = CFP_CHUNK;
		__u64 size = left * c->cfp_size;
		if (size == 0 || size > CHUNK_BYTES ||
		    bpf_probe_read_user(w->buf->cfps, size, (void *)cfp))
			goto stop;
		w->chunk = left;
	}
	if (j >= w->chunk)
		goto stop;
	// Fields are 8-aligned and inside their frame (ConfigFor checks); the
	// mask only proves to the verifier that they are inside the chunk.
	__u64 at = (__u64)j * c->cfp_size;
	__u8 *cfps = w->buf->cfps;
	struct frame *f = &w->buf->frames[i & (MAX_FRAMES - 1)];
	f->pc = *(__u64 *)(cfps + ((at + c->cfp_pc) & (CHUNK_BYTES - 8)));
	f->iseq = *(__u64 *)(cfps + ((at + c->cfp_iseq) & (CHUNK_BYTES - 8)));
	__u64 ep = *(__u64 *)(cfps + ((at + c->cfp_ep) & (CHUNK_BYTES - 8)));
	__u64 bits = 0, cme = 0;
	if (i == 0 && c->cfp_jit_return &&
	    *(__u64 *)(cfps + ((at + c->cfp_jit_return - 1) & (CHUNK_BYTES - 8))))
		w->top_jit = 1;

	// The flags come from the frame's own environment; the method entry
	// from the first environment in the chain that holds one. A local
	// environment's me_cref is a method entry, an svar that may hold one,
	// or neither: it goes out as it is, and user space tells which when it
	// names the frame, so a method's frame costs no read of the heap here.
	// The frame's own environment and the next (a block's method's) come
	// through the chunk; deeper ones, rare, alone: each read_env here is
	// verified frame by frame, and costs the verifier tens of ms.
	__u64 first = 0;
	int k;
	for (k = 0; k < MAX_EP_CHECKS; k++) {
		if (k <= 1 ? read_env(w, ep, env)
			   : (ep < 16 || bpf_probe_read_user(env, sizeof(env), (void *)(ep - 16)))) {
			bits = FRAME_ERROR;
			break;
		}
		if (k == 0)
			first = env[2];
		if (env[2] & c->env_local) {
			cme = env[0];
			if (cme == c->qnil || (cme & (c->imm_mask | FRAME_BITS)))
				cme = 0; // a special constant: no method entry
			break;
		}
		cme = method_entry(c, env[0]);
		if (cme)
			break;
		ep = env[1] & ~3ULL; // VM_ENV_PREV_EP
	}
	if (k == MAX_EP_CHECKS && !(bits & FRAME_ERROR)) {
		// A longer chain (a binding many evals grew): user space walks on
		// from ep, the next environment, and the sample wakes it at once.
		cme = ep & ~FRAME_BITS;
		bits = FRAME_ERROR;
		w->env_left = 1;
	}
	if (first & c->frame_cframe)
		bits |= FRAME_CFRAME;
	if (first & c->frame_finish)
		bits |= FRAME_FINISH;
	f->cme_flags = (cme & ~FRAME_BITS) | bits;
	return 0;
stop:
	w->stopped = 1;
	return 1;
}

// fresh_ctx is the state of one pass over a sample's frames for any_fresh.
struct fresh_ctx {
	struct proc_config *c;
	struct sample_buf *buf;
	__u32 pid, gen;
	__u64 epoch, interval;
	long n;
	__u32 fresh;
};

// old_object: v is a special constant or 0 (nothing to free), or an object
// whose flags say it is in the old generation.
static __always_inline int old_object(struct proc_config *c, __u64 v)
{
	__u64 flags;
	if (v == 0 || v == c->qnil || (v & c->imm_mask))
		return 1;
	if (bpf_probe_read_user(&flags, sizeof(flags), (void *)v))
		return 0;
	return (flags & c->fl_promoted) == c->fl_promoted;
}

// resolve_svar puts in a frame's cme_flags the method entry an svar there
// holds. A method that sets $~ or $_ gets an svar in its environment's
// me_cref, a new one each call: sent as it was, every call was a new frame
// key to user space, to be named while the svar was still there, so that
// a parser's lookup method, called all the run, read as code freed before
// it was named. One read of the object's flags a frame, after the walk.
static __always_inline void resolve_svar(struct proc_config *c, struct frame *f)
{
	__u64 v = f->cme_flags & ~FRAME_BITS, flags, inner;
	if (!v || v == c->qnil || (v & c->imm_mask))
		return;
	if (bpf_probe_read_user(&flags, sizeof(flags), (void *)v) || (flags & c->t_mask) != c->t_imemo ||
	    ((flags >> c->fl_ushift) & 0xf) != c->imemo_svar)
		return;
	if (bpf_probe_read_user(&inner, sizeof(inner), (void *)(v + c->svar_cref_or_me - 1)))
		return;
	if (method_entry(c, inner))
		f->cme_flags = (inner & ~FRAME_BITS) | (f->cme_flags & FRAME_BITS);
}

// fresh_frame: frame i is a Ruby frame not named for this sample's GC
// interval yet; such a frame gets its PC_*_OLD bits (a bpf_loop callback:
// the verifier follows one frame).
static long fresh_frame(__u32 i, void *data)
{
	struct fresh_ctx *fc = data;
	struct proc_config *c = fc->c;
	if (i >= fc->n || i >= MAX_FRAMES)
		return 1;
	struct frame *f = &fc->buf->frames[i & (MAX_FRAMES - 1)];
	if (f->cme_flags & FRAME_CFRAME) {
		// A C frame is named by its method entry alone, and never makes a
		// sample urgent (its name is read with the Ruby frames' when one
		// is new). Its pc is 0: the bit has room.
		if (!(f->cme_flags & FRAME_ERROR) && !(f->pc & PC_BITS) && c->fl_promoted &&
		    (fc->buf->h.flags & PAYLOAD_GC_STAMPED) && old_object(c, f->cme_flags & ~FRAME_BITS))
			f->pc |= PC_ME_OLD;
		return 0;
	}
	if (!f->iseq)
		return 0;
	struct frame_key key = {.pid = fc->pid, .gen = fc->gen, .iseq = f->iseq, .pc = f->pc};
	__u64 named_cme = 0;
	int is_known = known(&key, fc->epoch, fc->interval, &named_cme);
	if (!(f->cme_flags & FRAME_ERROR)) {
		// Only a slot that is not the method entry the frame was named
		// with is read (an svar, new each call, of a method that set $~).
		if (c->svar_cref_or_me && !(is_known && (!named_cme || named_cme == (f->cme_flags & ~FRAME_BITS))))
			resolve_svar(c, f);
		if (is_known && named_cme && named_cme != (f->cme_flags & ~FRAME_BITS))
			is_known = 0;
	}
	if (f->cme_flags & FRAME_ERROR) {
		// A chain left to user space: its next environment's object
		// (ep[1] of one that escaped) old says the rest of the chain,
		// which it keeps alive, is what user space will read.
		__u64 ep = f->cme_flags & ~FRAME_BITS, env[2];
		fc->fresh = 1;
		if (!ep || !c->fl_promoted || !c->env_escaped || !(fc->buf->h.flags & PAYLOAD_GC_STAMPED))
			return 0;
		if (!bpf_probe_read_user(env, sizeof(env), (void *)ep) && (env[0] & c->env_escaped) &&
		    env[1] && old_object(c, env[1]))
			f->pc |= PC_ENV_OLD;
		if (old_object(c, f->iseq))
			f->pc |= PC_ISEQ_OLD;
		return 0;
	}
	if (is_known)
		return 0;
	fc->fresh = 1;
	if (c->fl_promoted && (fc->buf->h.flags & PAYLOAD_GC_STAMPED)) {
		if (old_object(c, f->iseq))
			f->pc |= PC_ISEQ_OLD;
		if (old_object(c, f->cme_flags & ~FRAME_BITS))
			f->pc |= PC_ME_OLD;
	}
	return 0;
}

// any_fresh: one of the sample's Ruby frames is not named for this
// sample's GC interval yet. Every frame counts, not only the top ones: a
// name is proven for a sample only while what the sample ran is still
// there, and a frame deep in the stack whose name must be proven again (a
// major GC ends every name's epoch) is lost as surely as a top one if its
// sample waits in a batched ring while the GC runs on. It runs after the
// walk, not in it: the verifier follows the walk's callback frame by frame,
// and every branch there costs its time many times over.
static __always_inline __u32 any_fresh(struct proc_config *c, struct sample_buf *buf, __u32 pid, __u32 gen, long n)
{
	struct fresh_ctx fc = {.c = c, .buf = buf, .pid = pid, .gen = gen, .n = n};
	if (buf->h.flags & PAYLOAD_GC_STAMPED) {
		// While objects move no name can be read safely: nothing to hurry.
		if (buf->h.flags & PAYLOAD_GC_COMPACTING)
			return 0;
		fc.epoch = buf->h.gc_epoch;
		fc.interval = 2 * buf->h.gc_count + !(buf->h.flags & PAYLOAD_GC_MARKING);
	}
	bpf_loop(MAX_FRAMES, fresh_frame, &fc, 0);
	// The bits hold for the sample's stamp only if no GC started since.
	__u64 count = 0;
	if (fc.fresh && c->fl_promoted && (buf->h.flags & PAYLOAD_GC_STAMPED) &&
	    (bpf_probe_read_user(&count, sizeof(count), (void *)(c->gc_start + (c->gc_count & (GC_SPAN - 8)))) ||
	     count != buf->h.gc_count))
		buf->h.flags |= PAYLOAD_OLD_STALE;
	return fc.fresh;
}
