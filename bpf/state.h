// What the sampled thread and its process were doing besides its stack: the
// GC's progress and phase (stamp_gc), the GVL and blocking regions
// (thread_state).
// Included once, by ruby.bpf.c, after the maps and buffers it uses.

// stamp_gc reads the GC's counters and phase into the header.
static __always_inline void stamp_gc(struct proc_config *c, struct sample_buf *buf)
{
	__u32 span = c->gc_span;
	if (span < 8 || span > GC_SPAN || bpf_probe_read_user(buf->gc, span, (void *)c->gc_start))
		return;
	// ConfigFor checks the offsets are aligned and inside the span; the
	// masks only prove to the verifier that they are inside the buffer.
	buf->h.gc_count = *(__u64 *)(buf->gc + (c->gc_count & (GC_SPAN - 8)));
	buf->h.gc_epoch = *(__u64 *)(buf->gc + (c->gc_epoch & (GC_SPAN - 8)));
	__u32 flags = *(__u32 *)(buf->gc + (c->gc_flags & (GC_SPAN - 4)));
	buf->h.flags |= PAYLOAD_GC_STAMPED;
	if (((flags >> (c->gc_mode_shift & 31)) & c->gc_mode_mask) == c->gc_mode_marking)
		buf->h.flags |= PAYLOAD_GC_MARKING;
	if ((flags >> (c->gc_compacting_shift & 31)) & 1)
		buf->h.flags |= PAYLOAD_GC_COMPACTING;
	if (c->gc_running_shift && ((flags >> ((c->gc_running_shift - 1) & 31)) & 1)) {
		__u32 mode = (flags >> (c->gc_mode_shift & 31)) & c->gc_mode_mask;
		__u32 phase = GC_PHASE_UNKNOWN;
		if (mode == c->gc_mode_marking)
			phase = GC_PHASE_MARKING;
		else if ((buf->h.flags & PAYLOAD_GC_COMPACTING) || mode + 1 == c->gc_mode_compacting)
			phase = GC_PHASE_COMPACTING;
		else if (mode != c->gc_mode_none)
			phase = GC_PHASE_SWEEPING;
		buf->h.flags |= PAYLOAD_GC_RUNNING | (phase << PAYLOAD_GC_PHASE_SHIFT);
	}
}

// thread_state says in the header whether the thread holds its Ractor's
// GVL and whether it is in a blocking region: what it was doing, besides
// where. th is ec->thread_ptr.
static __always_inline void thread_state(struct proc_config *c, struct sample_buf *buf, __u64 ec, __u64 th)
{
	__u64 ractor = c->main_ractor;
	__u32 span = c->th_span;
	if (th && span >= 8 && span <= TH_SPAN && (c->th_ractor || c->th_unblock) &&
	    !bpf_probe_read_user(buf->th, span, (void *)(th + c->th_start))) {
		// ConfigFor checks the offsets are 8-aligned and inside the span.
		if (c->th_ractor)
			ractor = *(__u64 *)(buf->th + ((c->th_ractor - 1) & (TH_SPAN - 8)));
		if (c->th_unblock) {
			buf->h.flags |= PAYLOAD_REGION_KNOWN;
			if (*(__u64 *)(buf->th + ((c->th_unblock - 1) & (TH_SPAN - 8))))
				buf->h.flags |= PAYLOAD_IN_REGION;
		}
	}
	__u64 running = 0;
	if (ractor && th && c->ractor_gvl_owner) {
		if (!bpf_probe_read_user(&running, sizeof(running), (void *)(ractor + c->ractor_gvl_owner - 1))) {
			buf->h.flags |= PAYLOAD_GVL_KNOWN;
			if (running == th)
				buf->h.flags |= PAYLOAD_GVL_HELD;
		}
	} else if (ractor && c->ractor_running_ec &&
		   !bpf_probe_read_user(&running, sizeof(running), (void *)(ractor + c->ractor_running_ec - 1))) {
		buf->h.flags |= PAYLOAD_GVL_KNOWN | PAYLOAD_GVL_LAST;
		if (running == ec)
			buf->h.flags |= PAYLOAD_GVL_HELD;
	}
}
