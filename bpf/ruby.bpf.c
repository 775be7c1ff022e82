//go:build ignore

// The Ruby stack sampler. A perf_event program attached to per-CPU cpu-clock
// events: for a sample of a target process it reads the interrupted thread's
// execution context through its thread pointer and the TLS offset of
// ruby_current_ec, walks the VM's control frames like rubystack's Go walker,
// and writes one bpf-output record: the kernel adds TID, time, CPU, period,
// the native callchain, user registers and a copy of the user stack; RAW is
// the payload below. Offsets come from user space per process (struct
// proc_config), never from this file.
//
// Every loop and read is bounded; the bound's name says why.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// MAX_FRAMES bounds one walk. A perf record is at most 64 KiB (its header
// size is a u16); 2048 frames of 24 bytes (48 KiB) leave room for the 8 KiB
// user stack copy, 20 registers and a 127-entry callchain.
#define MAX_FRAMES 2048
// MAX_EP_CHECKS bounds the walk from a block's environment to its method's
// (otel measured 6 on a production Rails app). A longer chain is handed to
// user space: the frame goes out with FRAME_ERROR and, in place of its
// method entry, the environment where the walk stopped (FRAME_ERROR with a
// method entry of 0: the environment could not be read).
#define MAX_EP_CHECKS 10
// CFP_READ bounds a control frame: the largest (64 bytes, 3.1).
#define CFP_READ 64
// CFP_CHUNK control frames are read at once, in one read of up to
// CHUNK_BYTES: a read costs about the same for 56 bytes or 1 KiB.
#define CFP_CHUNK 16
#define CHUNK_BYTES (CFP_CHUNK * CFP_READ)
// ENV_CHUNK bytes of the VM stack ending at a frame's environment are read
// at once: the environments of the frames below it (older frames) lie below
// it on the same stack, so one read serves several frames.
#define ENV_CHUNK 1024
// EC_SPAN bounds the one read of the execution context's fields.
#define EC_SPAN 64
// GC_SPAN bounds the one read of the GC's counters and flags.
#define GC_SPAN 2048
// TH_SPAN bounds the one read of a thread's fields (its Ractor and its
// unblock function).
#define TH_SPAN 512
// Request labels (ruby-profiler's per-fiber state): at most MAX_LABELS
// pairs go out with a sample, read from a hash table of at most
// LABEL_SLOTS slots; of a heap object value, LABEL_OBJ bytes of the object
// and, for a String kept outside it, LABEL_EXT bytes of its contents.
#define MAX_LABELS 8
#define LABEL_SLOTS 64
#define LABEL_OBJ 64
#define LABEL_EXT 48

#define PAYLOAD_MAGIC 0x46504252 // "RBPF" little-endian
#define PAYLOAD_VERSION 8 // 2: cme_flags may hold an svar (struct frame); 3: the header has gen; 4: GC stamps; 5: thread state; 6: labels; 7: PC_*_OLD; 8: native frames

// payload_header.flags
#define PAYLOAD_TRUNCATED (1 << 0) // more than MAX_FRAMES frames
#define PAYLOAD_NO_EC (1 << 1)     // a thread without a Ruby EC: native stack only
#define PAYLOAD_READ_ERROR (1 << 2) // the EC or its stack could not be read
#define PAYLOAD_BAD_CFP (1 << 3)   // ec->cfp outside the VM stack
#define PAYLOAD_TOP_JIT (1 << 4)   // the top frame's cfp->jit_return is set: it runs JIT code
#define PAYLOAD_GC_STAMPED (1 << 5)    // gc_count and gc_epoch were read
#define PAYLOAD_GC_MARKING (1 << 6)    // the GC was marking (a major GC's incremental marking)
#define PAYLOAD_GC_COMPACTING (1 << 7) // the GC was compacting: objects may move
// 1 << 8 is set by user space (a named sample).
#define PAYLOAD_GC_RUNNING (1 << 9)   // flags.during_gc: a GC was under way
#define PAYLOAD_GC_PHASE_SHIFT 10     // 2 bits: its phase, a GC_PHASE_* (PAYLOAD_GC_RUNNING)
#define PAYLOAD_GVL_KNOWN (1 << 12)   // the thread's Ractor's running_ec was read
#define PAYLOAD_GVL_HELD (1 << 13)    // ... and is this sample's EC: the thread holds the GVL
#define PAYLOAD_REGION_KNOWN (1 << 14) // the thread's unblock.func was read
#define PAYLOAD_IN_REGION (1 << 15)   // ... and is set: a blocking region (GVL released)
#define PAYLOAD_OFFCPU (1 << 16)      // taken as the thread left the CPU; period holds when (ns, ktime)
#define PAYLOAD_PREEMPTED (1 << 17)   // ... and it was preempted, still runnable
#define PAYLOAD_GVL_LAST (1 << 18)    // GVL_HELD from running_ec: the last to take the GVL, maybe released since
#define PAYLOAD_LABELS_CUT (1 << 19)  // the fiber had more than MAX_LABELS labels
#define PAYLOAD_LABELS_BAD (1 << 20)  // its label table did not read as one
#define PAYLOAD_OLD_STALE (1 << 22)   // (21 is set by user space) a GC started while PC_*_OLD were read: they say nothing

#define GC_PHASE_UNKNOWN 0
#define GC_PHASE_MARKING 1
#define GC_PHASE_SWEEPING 2
#define GC_PHASE_COMPACTING 3

// Low bits of frame.cme_flags (method entries are 8-byte aligned).
#define FRAME_CFRAME (1 << 0)  // VM_FRAME_FLAG_CFRAME: a C frame
#define FRAME_FINISH (1 << 1)  // VM_FRAME_FLAG_FINISH: the first frame of a VM entry
#define FRAME_ERROR (1 << 2)   // the frame's env could not be read
#define FRAME_BITS 7ULL

// Low bits of frame.pc (a pc points to an 8-byte instruction word), set on
// the frames not named for the sample's GC interval yet: what the frame's
// name is read from was in the old generation when sampled, so that user
// space can tell it is still the same object a GC later (recording's
// sameObjects) without reading the process in time.
#define PC_ISEQ_OLD (1 << 0) // the iseq
#define PC_ME_OLD (1 << 1)   // the method entry (or svar) in cme_flags, or none (of a C frame too)
#define PC_ENV_OLD (1 << 2)  // the environment a long chain was left at (FRAME_ERROR) escaped to the heap, as an old object
#define PC_BITS 7ULL

// proc_config: one per target process, filled from rubystack.Layout.
struct proc_config {
	__s64 ec_tp_offset; // thread pointer + this = &ruby_current_ec
	// ec->vm_stack, ->vm_stack_size and ->cfp lie within ec_span bytes
	// (at most EC_SPAN) from ec + ec_start: one read; offsets from there.
	__u32 ec_start, ec_span;
	__u32 ec_vm_stack, ec_vm_stack_size, ec_cfp;
	__u32 cfp_size, cfp_pc, cfp_iseq, cfp_ep;
	__u32 skip_dummy_frame; // the walk ends one frame above the VM stack's end (3.2+)
	__u64 frame_cframe, frame_finish, env_local; // VM_FRAME_FLAG_CFRAME, _FINISH, VM_ENV_FLAG_LOCAL
	__u64 t_mask, t_imemo, fl_ushift, qnil, imm_mask;
	__u64 imemo_ment;
	// RUBY_FL_PROMOTED: an object's flags hold it all when the object is in
	// the old generation (0: frames go without PC_*_OLD bits).
	__u64 fl_promoted;
	__u64 env_escaped; // VM_ENV_FLAG_ESCAPED
	// imemo_svar, and svar->cref_or_me's offset + 1 (0: svars go out as
	// they are, for user space to resolve).
	__u64 imemo_svar;
	__u32 svar_cref_or_me;
	__u32 pad2;
	__u32 cfp_jit_return; // offset of cfp->jit_return + 1; 0: the layout has none
	// gen tells apart the process images a pid had while recording (user
	// space counts its attaches); samples and frame keys carry it.
	__u32 gen;
	// follow_forks: a child this process forks is a target from its first
	// instant, with this configuration (it has the same memory image).
	__u32 follow_forks;
	// The GC's progress, stamped on every sample so that user space can
	// tell whether a name it read at an address holds for the sample: one
	// read of gc_span bytes at gc_start (0: no stamp), holding the count of
	// GCs started (gc_count), the count when the last major GC started
	// (gc_epoch) and the 32-bit word of the GC's flags (gc_flags), at those
	// offsets from gc_start.
	__u64 gc_start;
	__u32 gc_span, gc_count, gc_epoch, gc_flags;
	__u32 gc_mode_shift, gc_mode_mask, gc_mode_marking; // flags.mode
	__u32 gc_compacting_shift;                          // flags.during_compacting
	__u32 gc_running_shift; // flags.during_gc's bit + 1; 0: the layout has none
	__u32 gc_mode_none;       // gc_mode_none
	__u32 gc_mode_compacting; // gc_mode_compacting + 1; 0: not known (during_compacting tells)
	// What the thread was doing: ec->thread_ptr (offset in the EC read + 1;
	// 0: not read), then one read of th_span bytes at th + th_start, holding
	// th->ractor and th->unblock.func (offsets from there + 1; 0: none).
	// The GVL holder is ractor->threads.running_ec (at ractor_running_ec
	// + 1 from the thread's Ractor, or from main_ractor when the layout does
	// not say where a thread keeps its Ractor).
	__u32 ec_thread;
	__u32 th_start, th_span, th_ractor, th_unblock;
	__u32 ractor_running_ec;
	__u32 ractor_gvl_owner; // offset of the GVL's owning thread + 1; 0: running_ec tells
	__u64 main_ractor;
	// wall: the process is also sampled as its threads leave the CPU, so
	// that a sample weighs the time off it (record --wall).
	__u32 wall;
	// Request labels: the thread-local ruby_profiler_state of a loaded
	// extension, through the thread's DTV: *(tp + labels_dtv) is the DTV,
	// its entry for module labels_mod (labels_dtv_entry bytes each, the
	// block's address at labels_dtv_val) the extension's TLS block, and
	// the variable is at labels_offset in it. labels_mod 0: none.
	// A thread whose DTV generation (dtv[0] at labels_dtv_counter) is below
	// labels_generation has not touched the extension since it was loaded:
	// its DTV may not reach the module. labels_static: the block is in
	// static TLS, at tp + labels_tp_offset in every thread.
	__u32 labels_dtv_entry;
	__u64 labels_mod, labels_offset;
	__s64 labels_dtv;
	__u32 labels_dtv_val, labels_dtv_counter;
	__u64 labels_generation;
	__s64 labels_tp_offset;
	__u32 labels_static;
	// A String value: flags & str_noembed says its bytes are at
	// *(obj + str_heap_ptr), str_heap_len bytes long.
	__u32 str_heap_ptr;
	__u64 str_noembed, t_string;
	__u32 str_heap_len;
	__u32 pad;
};

struct payload_header {
	__u32 magic;
	__u16 version;
	__u16 header_size; // bytes before the first frame
	__u32 length;      // bytes of header and frames: RAW is padded past it
	__u32 nframes;
	__u32 flags;
	__u32 pid, tid;
	__u32 gen; // proc_config.gen of the process when sampled
	__u64 ec;
	__u64 cfp;    // ec->cfp when sampled
	__u64 period; // the cpu-clock sample's period (ns): the weight of this sample
	__u64 gc_count; // GCs the process had started (PAYLOAD_GC_STAMPED)
	__u64 gc_epoch; // gc_count when its last major GC started
	__u32 nlabels;    // labels after the frames (version 6)
	__u32 label_size; // bytes of each
	// Native user frames after the labels (version 8): the PCs the program
	// unwound with the process's unwind tables, leaf first, and why it
	// stopped (a NATIVE_* value; NATIVE_OFF: it did not unwind).
	__u32 nnatives;
	__u32 native_stop;
};

// label: one key/value pair of the fiber's state when sampled.
struct label {
	__u64 key;   // an ID
	__u64 value; // a VALUE
	__u8 obj[LABEL_OBJ]; // a heap object value's first bytes (zeros for an immediate or an unreadable object)
	__u8 ext[LABEL_EXT]; // a String's bytes kept outside the object (as many as it has, up to LABEL_EXT)
};

struct frame {
	__u64 iseq;      // cfp->iseq (0 for C frames)
	__u64 pc;        // cfp->pc
	// cme_flags: the frame's method entry | FRAME_* bits. For a frame whose
	// method entry is in its local environment (every method's), that
	// environment's me_cref as found: the method entry, an svar holding it,
	// or neither (0 for a special constant). User space resolves it.
	__u64 cme_flags;
};

#define LABEL_FRAMES ((MAX_LABELS * sizeof(struct label) + sizeof(struct frame) - 1) / sizeof(struct frame))
// MAX_NATIVE bounds the native frames one sample carries.
#define MAX_NATIVE 512
#define NATIVE_FRAMES ((MAX_NATIVE * 8 + sizeof(struct frame) - 1) / sizeof(struct frame))
// USTACK_CHUNK bytes of the user stack are read at once by the native walk,
// from a little below the first address it needs: the frames above lie
// above it, so one read serves several.
#define USTACK_CHUNK 1024
#define USTACK_BELOW 64

struct sample_buf {
	struct payload_header h;
	// The frames, then the labels and the native frames (copied to follow
	// the last frame).
	struct frame frames[MAX_FRAMES + LABEL_FRAMES + NATIVE_FRAMES];
	__u64 natives[MAX_NATIVE]; // unwound here first (not output)
	struct label labels[MAX_LABELS]; // read here first (not output)
	__u64 pairs[2 * LABEL_SLOTS];    // the label table's slots (not output)
	__u8 cfps[CHUNK_BYTES]; // the control frames being walked (not output)
	__u8 envs[ENV_CHUNK];   // a part of the VM stack holding environments (not output)
	__u8 gc[GC_SPAN];       // the GC's counters and flags (not output)
	__u8 th[TH_SPAN];       // the thread's fields (not output)
	// The addresses envs holds. They live in the map value, not in struct
	// walk_ctx on the stack: the verifier does not track values in a map,
	// so the walk's states still converge from one frame to the next.
	__u64 env_lo, env_hi;
	// The part of the user stack the native walk reads from: USTACK_CHUNK
	// bytes from ustack_lo (ustack_lo ~0: none yet).
	__u8 ustack[USTACK_CHUNK + 8];
	__u64 ustack_lo;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); // tgid
	__type(value, struct proc_config);
} procs SEC(".maps");

// One scratch buffer per CPU (too large for a per-CPU map value); user space
// sets max_entries to the number of possible CPUs.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sample_buf);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

// urgent_events: rings for samples that user space must read at once.
// User space names a frame (iseq, pc) by reading the iseq's label and line
// table from the live process; code that runs once (a required file's top
// level, a class body, an eval) is garbage soon after. So a sample with a
// frame near the top that user space has not named yet goes here, where
// every sample wakes the reader; the rest go to events, read in batches.
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} urgent_events SEC(".maps");

struct frame_key {
	__u32 pid, gen;
	__u64 iseq, pc;
};

// frame_span: the samples a name user space read holds for: those stamped
// with GC epoch epoch and a GC interval (2 * gc_count, plus 1 unless the
// GC was marking) in [from, to]. Code is freed only by the GC, so a name
// read at an address says nothing about a sample of another interval,
// unless the code was in the old generation, which only a major GC frees.
struct frame_span {
	__u64 epoch, from, to;
	// cme: the method entry the frame was named with (0: any). A frame
	// whose cme_flags slot holds another (an svar of a method that set $~,
	// new each call) has it read and resolved before it counts as known.
	__u64 cme;
};

// known_frames: the Ruby frames user space has named, per process, and
// for which samples.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct frame_key);
	__type(value, struct frame_span);
} known_frames SEC(".maps");

// seen_frames: per CPU, a direct-mapped cache of entries found in
// known_frames. A hash map lookup costs a few hundred ns on a busy machine,
// an array slot next to nothing, and a running program samples the same
// frames again and again. An entry is checked against each sample's stamp
// like the map's.
#define SEEN_SLOTS 1024
struct seen_frame {
	struct frame_key key;
	struct frame_span span;
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SEEN_SLOTS);
	__type(key, __u32);
	__type(value, struct seen_frame);
} seen_frames SEC(".maps");

// covers: the span holds for a sample of this GC epoch and interval.
static __always_inline int covers(struct frame_span *s, __u64 epoch, __u64 interval)
{
	return s->epoch == epoch && s->from <= interval && interval <= s->to;
}

// known: user space has named the frame key for a sample of this GC epoch
// and interval (0 and 0 for a process without stamps: user space names its
// frames for good).
static __always_inline int known(struct frame_key *key, __u64 epoch, __u64 interval, __u64 *cme)
{
	__u32 slot = ((key->iseq ^ key->pc ^ key->pid) * 0x9E3779B97F4A7C15ULL) >> 54; // 10 bits
	slot &= SEEN_SLOTS - 1;
	struct seen_frame *seen = bpf_map_lookup_elem(&seen_frames, &slot);
	if (seen && seen->key.pid == key->pid && seen->key.gen == key->gen && seen->key.iseq == key->iseq &&
	    seen->key.pc == key->pc && covers(&seen->span, epoch, interval)) {
		*cme = seen->span.cme;
		return 1;
	}
	struct frame_span *span = bpf_map_lookup_elem(&known_frames, key);
	if (!span || !covers(span, epoch, interval))
		return 0;
	*cme = span->cme;
	if (seen) {
		seen->key = *key;
		seen->span = *span;
	}
	return 1;
}

// Counters for user space: index by the COUNT_* names.
#define COUNT_SAMPLES 0
#define COUNT_OUTPUT_ERRORS 1
#define COUNT_TRUNCATED 2
#define COUNT_URGENT 3
#define COUNT_EXECS 4 // targets that exec'd: no longer sampled with their old configuration
#define COUNT_FORKS 5 // children of targets made targets (follow_forks)
#define COUNT_OFFCPU 6 // samples taken as a target's thread left the CPU
#define COUNT_WAKE_ERRORS 7 // their ends not told to user space (ring full)
#define COUNT_MAX 8
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&counts, &i);
	if (v)
		*v += 1;
}

#if defined(__TARGET_ARCH_arm64)
// vmlinux.h is generated on x86_64; arm64 keeps the thread pointer in
// thread.uw.tp_value. CO-RE matches these by name without the ___ suffix.
struct thread_struct___arm64 {
	struct {
		unsigned long tp_value;
	} uw;
} __attribute__((preserve_access_index));
struct task_struct___arm64 {
	struct thread_struct___arm64 thread;
} __attribute__((preserve_access_index));
#endif

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

// read_ustack reads the user stack's u64 at addr, through buf->ustack.
static __always_inline long read_ustack(struct sample_buf *buf, __u64 addr, __u64 *out)
{
	__u64 off = addr - buf->ustack_lo;
	if (addr < buf->ustack_lo || off > USTACK_CHUNK - 8) {
		__u64 lo = addr - USTACK_BELOW;
		if (addr < USTACK_BELOW || bpf_probe_read_user(buf->ustack, USTACK_CHUNK, (void *)lo)) {
			// The end of the stack's mapping: read alone.
			buf->ustack_lo = ~0ULL;
			return bpf_probe_read_user(out, sizeof(*out), (void *)addr);
		}
		buf->ustack_lo = lo;
		off = USTACK_BELOW;
	}
	asm volatile("" : "+r"(off));
	*out = *(__u64 *)&buf->ustack[off & (USTACK_CHUNK - 1)];
	return 0;
}

struct native_ctx {
	struct proc_maps *pm;
	struct sample_buf *buf;
	__u64 pc, sp, fp;
	__u32 tgid;
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
// from first) at or below rel, or -1. A global function, as exec_map_of.
__attribute__((noinline)) long row_of(__u32 first, __u32 nrows, __u32 rel)
{
	__u32 lo = 0, n = nrows;
	if (n == 0 || n > (1 << ROW_SEARCH))
		return -1;
	struct unwind_row *r = bpf_map_lookup_elem(&unwind_rows, &first);
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

// call_ends_at: the 8 code bytes before a return address end with a call
// instruction: e8 rel32, or ff /2 (through a register, or memory through a
// register, SIB, disp8 or disp32, or rip+disp32), whatever prefixes it has.
static __always_inline int call_ends_at(__u8 b[8])
{
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

// jit_return: the slot (counted in 8 bytes from sp) of the first value
// above a JIT frame's sp that is a return address into code with rows, or
// -1. A global function, verified once.
__attribute__((noinline)) long jit_return(__u32 tgid, __u64 sp)
{
	struct proc_maps *pm = bpf_map_lookup_elem(&proc_unwind, &tgid);
	if (!pm)
		return -1;
	for (int c = 0; c < JIT_SCAN / 8; c++) {
		__u64 vals[8];
		if (bpf_probe_read_user(vals, sizeof(vals), (void *)(sp + c * 64)))
			return -1;
		for (int k = 0; k < 8; k++) {
			__u64 v = vals[k];
			long mi = exec_map_of(tgid, v);
			if (mi < 0)
				continue;
			struct exec_map *m = &pm->maps[mi & (MAX_EXEC_MAPS - 1)];
			if (m->nrows == 0 || v - 1 < m->base || v - 1 - m->base > 0xffffffffULL)
				continue;
			long ri = row_of(m->rows, m->nrows, (__u32)(v - 1 - m->base));
			__u32 rk = ri;
			struct unwind_row *r = ri < 0 ? NULL : bpf_map_lookup_elem(&unwind_rows, &rk);
			if (!r || (r->kind & ROW_CFA_MASK) == ROW_CFA_NONE)
				continue;
			__u8 code[8];
			if (bpf_probe_read_user(code, sizeof(code), (void *)(v - 8)) || !call_ends_at(code))
				continue;
			return c * 8 + k;
		}
	}
	return -1;
}

// native_step unwinds one frame: a bpf_loop callback, frame i written by
// iteration i.
static long native_step(__u32 i, void *arg)
{
	struct native_ctx *n = arg;
	if (i >= MAX_NATIVE || n->pc == 0) {
		n->stop = n->pc ? NATIVE_DEPTH : NATIVE_OUTERMOST;
		n->nowrite = 1;
		return 1;
	}
	__u64 slot = i;
	// Keep the compiler from dropping the mask it can prove redundant: the
	// verifier must see it on the register used.
	asm volatile("" : "+r"(slot));
	n->buf->natives[slot & (MAX_NATIVE - 1)] = n->pc;
	// A return address points after its call: look up the call.
	__u64 addr = n->pc - (n->ret ? 1 : 0);
	__u32 gen = n->pm->gen;
	__u32 ck = ((addr ^ n->tgid) * 0x9E3779B97F4A7C15ULL) >> 52; // 12 bits
	ck &= ROW_CACHE_SLOTS - 1;
	struct cached_row *c = bpf_map_lookup_elem(&row_cache, &ck);
	struct unwind_row *r;
	if (c && c->addr == addr && c->tgid == n->tgid && c->gen == gen) {
		r = &c->row;
	} else {
		long mi = exec_map_of(n->tgid, n->pc);
		if (mi < 0) {
			n->stop = NATIVE_NO_TABLE;
			return 1;
		}
		struct exec_map *m = &n->pm->maps[mi & (MAX_EXEC_MAPS - 1)];
		if (m->nrows == 0) { // JIT code
			long slot = jit_return(n->tgid, n->sp);
			if (slot < 0 || slot >= JIT_SCAN) {
				n->stop = NATIVE_NO_TABLE;
				return 1;
			}
			__u64 at = n->sp + 8 * slot, ra, fp;
			if (read_ustack(n->buf, at, &ra)) {
				n->stop = NATIVE_READ;
				return 1;
			}
			// A JIT that keeps a frame pointer saved its caller's below
			// the return address, and pointed FP there.
			if (n->fp_known && slot > 0 && n->fp == at - 8) {
				n->fp_known = !read_ustack(n->buf, at - 8, &fp);
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
		long ri = row_of(m->rows, m->nrows, (__u32)rel);
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
		if (read_ustack(n->buf, n->sp + SIGNAL_SP, &sp) || read_ustack(n->buf, n->sp + SIGNAL_PC, &pc)) {
			n->stop = NATIVE_READ;
			return 1;
		}
		n->fp_known = !read_ustack(n->buf, n->sp + SIGNAL_FP, &fp);
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
	if (read_ustack(n->buf, cfa - 8, &ra)) {
		n->stop = NATIVE_READ;
		return 1;
	}
	switch (kind & ROW_FP_MASK) {
	case ROW_FP_AT_CFA:
		n->fp_known = !read_ustack(n->buf, cfa + 8 * fp_off, &fp);
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

// unwind_native walks the current task's user stack into buf->natives;
// it returns how many frames it wrote and sets buf->h.native_stop.
static __always_inline __u32 unwind_native(struct sample_buf *buf, __u32 tgid)
{
	struct proc_maps *pm = bpf_map_lookup_elem(&proc_unwind, &tgid);
	if (!pm)
		return 0;
	void *regs = (void *)bpf_task_pt_regs(bpf_get_current_task_btf());
	struct native_ctx n = {.pm = pm, .buf = buf, .fp_known = 1, .tgid = tgid};
	if (!regs) {
		buf->h.native_stop = NATIVE_NO_REGS;
		return 0;
	}
#if defined(__TARGET_ARCH_x86)
	n.pc = BPF_CORE_READ((struct pt_regs *)regs, ip);
	n.sp = BPF_CORE_READ((struct pt_regs *)regs, sp);
	n.fp = BPF_CORE_READ((struct pt_regs *)regs, bp);
#elif defined(__TARGET_ARCH_arm64)
	// struct user_pt_regs (uapi): regs[31], sp, pc, pstate; x29 is the
	// frame pointer. (The return address in x30 is not modelled yet.)
	__u64 r[33];
	if (bpf_probe_read_kernel(r, sizeof(r), regs)) {
		buf->h.native_stop = NATIVE_NO_REGS;
		return 0;
	}
	n.fp = r[29];
	n.sp = r[31];
	n.pc = r[32];
#endif
	long got = bpf_loop(MAX_NATIVE + 1, native_step, &n, 0);
	if (got > 0 && n.nowrite)
		got--;
	if (got < 0)
		got = 0;
	if (got > MAX_NATIVE)
		got = MAX_NATIVE;
	buf->h.native_stop = n.stop ? n.stop : NATIVE_DEPTH;
	return got;
}

// sample writes one sample of the current task, a thread of target
// process tgid: period is its weight (ns), or for a sample taken as the
// thread leaves the CPU (flags PAYLOAD_OFFCPU) the time it left, which user
// space turns into the time it stayed off. It returns 0 when it wrote one.
static __always_inline int sample(void *ctx, struct proc_config *c, __u64 pid_tgid, __u64 period, __u32 flags)
{
	__u32 tgid = pid_tgid >> 32;
	__u32 cpu = bpf_get_smp_processor_id();
	struct sample_buf *buf = bpf_map_lookup_elem(&scratch, &cpu);
	if (!buf)
		return 0;
	count(COUNT_SAMPLES);
	buf->h.magic = PAYLOAD_MAGIC;
	buf->h.version = PAYLOAD_VERSION;
	buf->h.header_size = sizeof(struct payload_header);
	buf->h.nframes = 0;
	buf->h.flags = flags;
	buf->h.pid = tgid;
	buf->h.gen = c->gen;
	buf->h.tid = (__u32)pid_tgid;
	buf->h.ec = 0;
	buf->h.cfp = 0;
	buf->h.period = period;
	buf->h.gc_count = 0;
	buf->h.gc_epoch = 0;
	buf->h.nlabels = 0;
	buf->h.label_size = sizeof(struct label);
	buf->h.nnatives = 0;
	buf->h.native_stop = NATIVE_OFF;
	buf->env_lo = buf->env_hi = 0;
	buf->ustack_lo = ~0ULL;

	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 tp = 0;
#if defined(__TARGET_ARCH_x86)
	tp = BPF_CORE_READ(task, thread.fsbase);
#elif defined(__TARGET_ARCH_arm64)
	tp = BPF_CORE_READ((struct task_struct___arm64 *)task, thread.uw.tp_value);
#endif
	__u64 ec = 0;
	__u32 fresh = 0;
	if (!tp || bpf_probe_read_user(&ec, sizeof(ec), (void *)(tp + c->ec_tp_offset)))
		buf->h.flags |= PAYLOAD_READ_ERROR;
	else if (!ec)
		buf->h.flags |= PAYLOAD_NO_EC;
	// A thread without a Ruby execution context (Ruby's timer thread, a C
	// extension's worker) is not followed off the CPU: its waits say
	// nothing of Ruby's, and it may wait for the whole recording.
	if (!ec && (flags & PAYLOAD_OFFCPU))
		return 1;
	buf->h.ec = ec;

	if (ec) {
		if (c->gc_span)
			stamp_gc(c, buf);
		__u64 fields[EC_SPAN / 8];
		__u32 span = c->ec_span;
		if (span == 0 || span > EC_SPAN ||
		    bpf_probe_read_user(fields, span, (void *)(ec + c->ec_start))) {
			buf->h.flags |= PAYLOAD_READ_ERROR;
			goto out;
		}
		// ConfigFor checks the offsets are 8-aligned and inside the span.
		__u64 stack = fields[(c->ec_vm_stack / 8) & (EC_SPAN / 8 - 1)];
		__u64 size = fields[(c->ec_vm_stack_size / 8) & (EC_SPAN / 8 - 1)];
		__u64 cfp = fields[(c->ec_cfp / 8) & (EC_SPAN / 8 - 1)];
		if (c->ec_thread)
			thread_state(c, buf, ec, fields[((c->ec_thread - 1) / 8) & (EC_SPAN / 8 - 1)]);
		if (stack && cfp) {
			__u64 end = stack + size * 8;
			if (c->skip_dummy_frame)
				end -= c->cfp_size;
			buf->h.cfp = cfp;
			if (cfp < stack || cfp > end || c->cfp_size == 0) {
				buf->h.flags |= PAYLOAD_BAD_CFP;
			} else {
				struct walk_ctx w = {.cfg = c, .buf = buf, .cfp = cfp, .end = end, .pid = tgid,
						     .stack_lo = stack, .stack_hi = stack + size * 8};
				long n = bpf_loop(MAX_FRAMES, walk_frame, &w, 0);
				if (w.top_jit)
					buf->h.flags |= PAYLOAD_TOP_JIT;
				if (n > 0 && w.stopped)
					n--; // the iteration that stopped wrote nothing
				if (n < 0)
					n = 0;
				if (n > MAX_FRAMES)
					n = MAX_FRAMES;
				buf->h.nframes = n;
				// User space walks on from where a long chain was left
				// while the chain is what it was when sampled.
				fresh = any_fresh(c, buf, tgid, c->gen, n) || w.env_left;
				if (n >= MAX_FRAMES && cfp + (__u64)MAX_FRAMES * c->cfp_size < end) {
					buf->h.flags |= PAYLOAD_TRUNCATED;
					count(COUNT_TRUNCATED);
				}
			}
		}
	}

out:;
	__u32 nf = buf->h.nframes;
	if (nf > MAX_FRAMES)
		nf = MAX_FRAMES;
	// Labels are read last: a count known this early would stay live
	// through the walk and multiply the verifier's states by its values.
	__u32 nlabels = tp ? read_labels(c, buf, tp) : 0;
	if (nlabels > MAX_LABELS)
		nlabels = MAX_LABELS;
	// The labels follow the last frame.
	__u64 lsize = (__u64)nlabels * sizeof(struct label);
	// Keep the compiler from checking a copy of lsize: the verifier must
	// see the bound on the register passed.
	asm volatile("" : "+r"(lsize));
	if (lsize > sizeof(buf->labels))
		lsize = 0;
	if (lsize && !bpf_probe_read_kernel(&buf->frames[nf], lsize, buf->labels))
		buf->h.nlabels = lsize / sizeof(struct label);
	__u64 len = sizeof(struct payload_header) + (__u64)nf * sizeof(struct frame) +
		    (__u64)buf->h.nlabels * sizeof(struct label);
	// The native frames follow the labels.
	__u64 nsize = (__u64)unwind_native(buf, tgid) * 8;
	asm volatile("" : "+r"(nsize));
	__u64 at = len - sizeof(struct payload_header);
	asm volatile("" : "+r"(at));
	if (nsize > sizeof(buf->natives) || at > (MAX_FRAMES + LABEL_FRAMES) * sizeof(struct frame))
		nsize = 0;
	if (nsize && !bpf_probe_read_kernel((__u8 *)buf->frames + at, nsize, buf->natives)) {
		buf->h.nnatives = nsize / 8;
		len += nsize;
	}
	if (len > sizeof(struct payload_header) + sizeof(buf->frames))
		len = sizeof(struct payload_header) + sizeof(buf->frames);
	buf->h.length = len;
	long err;
	if (fresh) {
		count(COUNT_URGENT);
		err = bpf_perf_event_output(ctx, &urgent_events, BPF_F_CURRENT_CPU, buf, len);
	} else {
		err = bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, buf, len);
	}
	if (err)
		count(COUNT_OUTPUT_ERRORS);
	return err ? -1 : 0;
}

SEC("perf_event")
int sample_ruby(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct proc_config *c = bpf_map_lookup_elem(&procs, &tgid);
	if (!c)
		return 0; // not a target: the cpu-clock event records nothing either
	sample(ctx, c, pid_tgid, ctx->sample_period, 0);
	return 0;
}

// offcpu_since: the threads of targets sampled as they left the CPU, and
// when (bpf_ktime_get_ns), until they are back on one.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, __u32);   // tid
	__type(value, __u64); // ktime it left
} offcpu_since SEC(".maps");

// offcpu_end: a thread back on a CPU; user space gives the sample taken as
// it left (found by tid and left) the weight end - left.
struct offcpu_end {
	__u32 pid, tid;
	__u64 left, end;
};
// Its type goes into BTF for bpf2go's -type offcpu_end: no map names it.
const struct offcpu_end *offcpu_end_type __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} offcpu_ends SEC(".maps");

// Wall-clock time: a thread of a target that follows it (proc_config.wall)
// is sampled as it leaves a CPU, where it blocked; when it is back on one,
// user space learns how long it was off and weighs that sample by it. The
// program runs on the CPU the thread leaves, in its context: the sample's
// stacks, registers and stack copy are the thread's own.
SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 next_tid = next->pid;
	__u64 *left = bpf_map_lookup_elem(&offcpu_since, &next_tid);
	if (left) {
		struct offcpu_end e = {.pid = next->tgid, .tid = next_tid, .left = *left, .end = now};
		bpf_map_delete_elem(&offcpu_since, &next_tid);
		if (bpf_ringbuf_output(&offcpu_ends, &e, sizeof(e), BPF_RB_NO_WAKEUP))
			count(COUNT_WAKE_ERRORS);
	}
	__u32 tgid = prev->tgid, tid = prev->pid;
	struct proc_config *c = bpf_map_lookup_elem(&procs, &tgid);
	if (!c || !c->wall || tid == 0)
		return 0;
	// A thread leaving the CPU for the last time (do_task_dead) never comes
	// back: there is no time off to weigh.
	if (prev->exit_state)
		return 0;
	__u64 pid_tgid = ((__u64)tgid << 32) | tid;
	// Still runnable (TASK_RUNNING): preempted, by the kernel's preemption
	// or on the way back to user space, not blocked.
	__u32 flags = PAYLOAD_OFFCPU;
	if (preempt || BPF_CORE_READ(prev, __state) == 0)
		flags |= PAYLOAD_PREEMPTED;
	if (sample(ctx, c, pid_tgid, now, flags) == 0) {
		count(COUNT_OFFCPU);
		bpf_map_update_elem(&offcpu_since, &tid, &now, BPF_ANY);
	}
	return 0;
}

// A target that execs is another program from that instant: its old
// configuration would read the new image as if it were the old one. It is
// no longer a target; user space sees the exec (a COMM record) and decides
// whether to attach to the new image.
SEC("tp_btf/sched_process_exec")
int BPF_PROG(target_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = p->tgid;
	if (bpf_map_delete_elem(&procs, &tgid) == 0)
		count(COUNT_EXECS);
	bpf_map_delete_elem(&proc_unwind, &tgid); // its mappings are gone
	return 0;
}

// A new process forked by a target that follows forks is a target from its
// first instant: until it execs it runs the same image, so the same
// configuration reads it. New threads (same tgid) are not new processes, and
// a vfork child runs no Ruby of its own.
SEC("tp_btf/sched_process_fork")
int BPF_PROG(target_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	// A vfork child (posix_spawn, system) shares its parent's memory and
	// thread pointer until it execs: read as a Ruby, it would show the
	// parent's stack under its own pid.
	if (ptgid == ctgid || child->mm == parent->mm)
		return 0;
	struct proc_config *c = bpf_map_lookup_elem(&procs, &ptgid);
	if (!c || !c->follow_forks)
		return 0;
	struct proc_config copy = *c;
	if (bpf_map_update_elem(&procs, &ctgid, &copy, BPF_NOEXIST) == 0)
		count(COUNT_FORKS);
	// ... and the same mappings.
	struct proc_maps *pm = bpf_map_lookup_elem(&proc_unwind, &ptgid);
	if (pm)
		bpf_map_update_elem(&proc_unwind, &ctgid, pm, BPF_NOEXIST);
	return 0;
}
