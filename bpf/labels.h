// Request labels: the per-fiber state of the ruby-profiler gem's extension,
// read through the thread's DTV (read_labels).
// Included once, by ruby.bpf.c, after the maps and buffers it uses.

// label_ctx is the state of one pass over a label table's slots.
struct label_ctx {
	struct proc_config *c;
	struct sample_buf *buf;
	__u32 n, cut;
};

// label_slot copies slot i of the label table (in buf->pairs), if it holds
// a pair, into the next label: a bpf_loop callback, so that the verifier
// follows one slot, not LABEL_SLOTS of them.
static long label_slot(__u32 i, void *data)
{
	struct label_ctx *lc = data;
	struct proc_config *c = lc->c;
	struct sample_buf *buf = lc->buf;
	if (i >= LABEL_SLOTS)
		return 1;
	__u64 key = buf->pairs[(2 * i) & (2 * LABEL_SLOTS - 1)];
	__u64 value = buf->pairs[(2 * i + 1) & (2 * LABEL_SLOTS - 1)];
	if (!key)
		return 0;
	if (lc->n >= MAX_LABELS) {
		lc->cut = 1;
		return 1;
	}
	struct label *l = &buf->labels[lc->n & (MAX_LABELS - 1)];
	lc->n++;
	l->key = key;
	l->value = value;
	__builtin_memset(l->obj, 0, sizeof(l->obj));
	__builtin_memset(l->ext, 0, sizeof(l->ext));
	if (!value || value == c->qnil || (value & c->imm_mask) || (value & 7))
		return 0; // an immediate (or not an object): the value says it all
	if (bpf_probe_read_user(l->obj, sizeof(l->obj), (void *)value))
		return 0;
	__u64 flags = *(__u64 *)l->obj;
	if ((flags & c->t_mask) != c->t_string || !(flags & c->str_noembed) || !c->str_heap_ptr)
		return 0;
	__u64 ptr = *(__u64 *)(l->obj + (c->str_heap_ptr & (LABEL_OBJ - 8)));
	__u64 len = *(__u64 *)(l->obj + (c->str_heap_len & (LABEL_OBJ - 8)));
	if (len > LABEL_EXT)
		len = LABEL_EXT;
	if (ptr && len)
		bpf_probe_read_user(l->ext, len, (void *)ptr);
	return 0;
}

// read_labels reads the pairs of the fiber's ruby_profiler_state into
// buf->labels and returns how many. tp is the thread pointer.
static __always_inline __u32 read_labels(struct proc_config *c, struct sample_buf *buf, __u64 tp)
{
	__u64 dtv = 0, block = 0, state = 0, gen = 0, head[2];
	if (!c->labels_mod || c->labels_dtv_entry > 64 || c->labels_mod > 4096)
		return 0;
	if (c->labels_static) {
		block = tp + c->labels_tp_offset;
	} else if (bpf_probe_read_user(&dtv, sizeof(dtv), (void *)(tp + c->labels_dtv)) || !dtv ||
		   bpf_probe_read_user(&gen, sizeof(gen), (void *)(dtv + c->labels_dtv_counter)) ||
		   gen < c->labels_generation ||
		   bpf_probe_read_user(&block, sizeof(block),
				       (void *)(dtv + c->labels_mod * c->labels_dtv_entry + c->labels_dtv_val))) {
		return 0;
	}
	// TLS_DTV_UNALLOCATED: the thread never touched the extension's TLS.
	if (!block || block == (__u64)-1 ||
	    bpf_probe_read_user(&state, sizeof(state), (void *)(block + c->labels_offset)) || !state)
		return 0;
	__u64 cap;
	if (bpf_probe_read_user(head, sizeof(head), (void *)state) ||
	    (cap = head[1]) == 0 || cap > LABEL_SLOTS || (cap & (cap - 1)) ||
	    bpf_probe_read_user(buf->pairs, cap * 16, (void *)(state + 16))) {
		buf->h.flags |= PAYLOAD_LABELS_BAD;
		return 0;
	}
	struct label_ctx lc = {.c = c, .buf = buf};
	bpf_loop(cap, label_slot, &lc, 0);
	if (lc.cut)
		buf->h.flags |= PAYLOAD_LABELS_CUT;
	__u32 n = lc.n;
	return n;
}
