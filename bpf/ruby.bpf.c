//go:build ignore

// The Ruby stack sampler. A perf_event program attached to per-CPU cpu-clock
// events: for a sample of a target process it reads the interrupted thread's
// execution context through its thread pointer and the TLS offset of
// ruby_current_ec, walks the VM's control frames like rubystack's Go walker,
// unwinds the native user stack with the unwind tables user space compiled,
// and writes one bpf-output record: the kernel adds TID, time, CPU, period,
// the kernel callchain and, if asked, user registers and a copy of the user
// stack; RAW is the payload below. Offsets come from user space per process
// (struct proc_config), never from this file. The parts are in walk.h (the
// Ruby stack), state.h (the GC and the thread's state), labels.h (request
// labels) and native.h (native unwinding).
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
#define PAYLOAD_VERSION 14 // 2: cme_flags may hold an svar (struct frame); 3: the header has gen; 4: GC stamps; 5: thread state; 6: labels; 7: PC_*_OLD; 8: native frames; (9: user space's compact form of 8); 10: allocation samples; (11: compact 10); 12: their window; (13: compact 12); 14: the slot the allocation took, and its class as named

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
#define PAYLOAD_ALLOC (1 << 24)       // (23 is set by user space) an allocation sample: period holds objects, alloc_bytes their bytes (as seen, before the window's weight)

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
	// Allocations (record --alloc): a thread is sampled once the objects
	// of the allocation-cache refills it ran add up to alloc_every (0: not
	// sampled at refills). The refills are watched only part of the time
	// (user space arms the uprobes in windows): user space weighs each
	// window's samples by what the window stands for once it has ended.
	__u64 alloc_every;
	// alloc_window numbers the window the uprobes are armed in: the
	// program sums each window's refills (alloc_windows) and stamps its
	// samples with it (payload_header.alloc_window). 0: between windows
	// (the uprobes are being taken off): a refill is not counted.
	__u32 alloc_window;
	// Exact weights, where the layout says where the GC counts
	// allocations: the pool a page belongs to (heap_page size_pool or
	// heap) at alloc_page_pool - 1 in the page, whose counter is at
	// alloc_pool_counter - 1 in the pool; or the one counter of the
	// process at alloc_counter (0: none).
	__u32 alloc_page_pool;
	__u32 alloc_pool_counter;
	__u32 pad3;
	__u64 alloc_counter;
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
	// An allocation sample's bytes (version 10; PAYLOAD_ALLOC): what the
	// objects in period take in their slots.
	__u64 alloc_bytes;
	// The window of armed uprobes it was taken in (version 12;
	// proc_config.alloc_window).
	__u32 alloc_window;
	// Version 14. The thread's allocation samples are numbered
	// (alloc_seq, from 1), and each carries the slot the allocation that
	// ran its refill takes: the head of the page's free list at the refill
	// (0: the site does not hold it). A slot comes back within a window
	// once a GC has swept it: the number tells its samples apart.
	__u32 alloc_seq;
	__u64 alloc_slot;
	// The id of the allocated object's class's name: 0 as the program
	// writes it; user space sets it once it has learned what the slot held
	// (struct alloc_seen).
	__u64 alloc_class;
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
// above it, so one read serves several. A read costs little more for 4 KiB
// than for 1 KiB, and 242 native frames took 34 reads of 1 KiB, 9 of 4.
#define USTACK_CHUNK 4096
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
	__u64 ec[EC_SPAN / 8];  // the execution context's fields (not output; off the stack, which is full)
	// The addresses envs holds. They live in the map value, not in struct
	// walk_ctx on the stack: the verifier does not track values in a map,
	// so the walk's states still converge from one frame to the next.
	__u64 env_lo, env_hi;
	// The part of the user stack the native walk reads from: [ustack_lo,
	// ustack_hi), at most USTACK_CHUNK bytes (ustack_lo ~0: none yet).
	__u8 ustack[USTACK_CHUNK + 8];
	__u64 ustack_lo, ustack_hi;
	// ustack_end: the main thread's stack holds no frame above it (the
	// process's mm->start_stack, where argc lies; 0: unknown). Above argc
	// and the vectors the kernel leaves a gap of up to 8 KiB nothing wrote,
	// and a read of a page never touched fails by faulting, slowly.
	__u64 ustack_end;
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

// seen_frames: per CPU, a cache of entries found in known_frames, in
// SEEN_SETS sets of SEEN_WAYS entries. A hash map lookup costs a few hundred
// ns on a busy machine, an array slot next to nothing, and a running program
// samples the same frames again and again. A deep stack of distinct methods
// brings 200 keys a sample: direct-mapped, a sixth of them collided at every
// sample and went to the map; with four ways, one or two. An entry is
// checked against each sample's stamp like the map's.
#define SEEN_SETS 256
#define SEEN_WAYS 4
struct seen_frame {
	struct frame_key key;
	struct frame_span span;
};
struct seen_set {
	struct seen_frame way[SEEN_WAYS];
	__u32 next; // the way the next miss replaces
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SEEN_SETS);
	__type(key, __u32);
	__type(value, struct seen_set);
} seen_frames SEC(".maps");

// covers: the span holds for a sample of this GC epoch and interval.
static __always_inline int covers(struct frame_span *s, __u64 epoch, __u64 interval)
{
	return s->epoch == epoch && s->from <= interval && interval <= s->to;
}

static __always_inline int same_frame(struct frame_key *a, struct frame_key *b)
{
	return a->pid == b->pid && a->gen == b->gen && a->iseq == b->iseq && a->pc == b->pc;
}

// known: user space has named the frame key for a sample of this GC epoch
// and interval (0 and 0 for a process without stamps: user space names its
// frames for good). A global function, verified once: inlined into the
// walk of the Ruby frames, its ways' branches doubled the time the kernel
// took to verify the program.
__attribute__((noinline)) int known(struct frame_key *key, __u64 epoch, __u64 interval, __u64 *cme)
{
	if (!key || !cme)
		return 0;
	__u32 slot = ((key->iseq ^ key->pc ^ key->pid) * 0x9E3779B97F4A7C15ULL) >> 56; // 8 bits
	slot &= SEEN_SETS - 1;
	struct seen_set *set = bpf_map_lookup_elem(&seen_frames, &slot);
	__u32 stale = SEEN_WAYS; // the way that holds the key for another interval, if one does
	if (set) {
#pragma unroll
		for (int w = 0; w < SEEN_WAYS; w++) {
			struct seen_frame *seen = &set->way[w];
			if (!same_frame(&seen->key, key))
				continue;
			if (covers(&seen->span, epoch, interval)) {
				*cme = seen->span.cme;
				return 1;
			}
			stale = w;
		}
	}
	struct frame_span *span = bpf_map_lookup_elem(&known_frames, key);
	if (!span || !covers(span, epoch, interval))
		return 0;
	*cme = span->cme;
	if (set) {
		// A stale entry of the same key (a span of an earlier interval) is
		// replaced in place, so that a key never holds two ways.
		__u32 w = stale < SEEN_WAYS ? stale : set->next;
		w &= SEEN_WAYS - 1;
		set->way[w].key = *key;
		set->way[w].span = *span;
		if (stale >= SEEN_WAYS)
			set->next = w + 1;
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
#define COUNT_REFILLS 8 // allocation-cache refills of targets seen (record --alloc)
#define COUNT_ALLOCS 9 // allocation samples taken of them
#define COUNT_SEEN_ERRORS 10 // what their slots held not told to user space (ring full)
#define COUNT_MAX 11
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

#include "walk.h"
#include "state.h"
#include "labels.h"
#include "native.h"

// alloc_acc: a thread's allocation refills since its last allocation
// sample (see alloc_refill).
struct alloc_acc {
	__u64 objects, bytes;
	// The slot of the thread's last allocation sample, its window and
	// its number: what it holds is read at the thread's next refill
	// (alloc_seen).
	__u64 slot;
	__u32 window, seq;
};

// sample writes one sample of the current task, a thread of target
// process tgid: period is its weight (ns), or for a sample taken as the
// thread leaves the CPU (flags PAYLOAD_OFFCPU) the time it left, which user
// space turns into the time it stayed off. It returns 0 when it wrote one.
static __always_inline int sample(void *ctx, struct proc_config *c, __u64 pid_tgid, __u64 period, __u32 flags,
				  const struct alloc_acc *alloc)
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
	buf->h.alloc_bytes = alloc ? alloc->bytes : 0;
	buf->h.alloc_window = (flags & PAYLOAD_ALLOC) ? c->alloc_window : 0;
	buf->h.alloc_seq = alloc ? alloc->seq : 0;
	buf->h.alloc_slot = alloc ? alloc->slot : 0;
	buf->h.alloc_class = 0;
	buf->env_lo = buf->env_hi = 0;
	buf->ustack_lo = ~0ULL;
	buf->ustack_hi = 0;

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
		__u64 *fields = buf->ec;
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
	sample(ctx, c, pid_tgid, ctx->sample_period, 0, NULL);
	return 0;
}

// Allocations. CRuby hands out objects from a per-Ractor cache of free
// slots; when a size pool's cache runs dry it takes the next heap page
// with free slots, moving the page's whole free list to the cache and
// zeroing the page's free_slots. User space found that store (rubybuild's
// RefillSites) and puts a uprobe on it; the attach cookie says which
// register holds the page there and where the page keeps free_slots and
// slot_size. Before the store runs, free_slots is how many objects the
// cache will hand out of that page: each refill stands for them, so a
// sample at refills is unbiased. A thread's refills add up in alloc_acc
// until they reach its process's alloc_every: then the thread's stacks
// are sampled, weighed by the objects and bytes that add up to it.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 14);
	__type(key, __u32); // tid
	__type(value, struct alloc_acc);
} alloc_accs SEC(".maps");

// alloc_window: what a process's refills were in its latest window
// (proc_config.alloc_window): how many, when the first and the last came,
// and the objects they stood for, as seen (before the window's weight). User space
// keeps the refills seen within its budget with it, and sets the objects
// against the GC's allocation counter.
struct alloc_window {
	__u32 window, refills;
	__u64 first, last; // bpf_ktime_get_ns
	__u64 objects;     // the refills' objects (refill_weight), as seen
	// busy: the time (ns) the program ran for the refills counted, their
	// samples' walks included. A deep stack costs more to walk than a
	// shallow one: the part of a refill's stall that is not the same at
	// every refill, measured rather than fitted.
	__u64 busy;
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); // tgid
	__type(value, struct alloc_window);
} alloc_windows SEC(".maps");

// alloc_pools: of each pool of a process, the last refill seen: in which
// window, the objects its page was credited with, and the pool's
// allocation counter then. A page's free slots are what the cache will
// hand out, unless a GC starts first and takes the rest back (every GC
// does, from every pool's cache): at the next refill of the pool, the
// counter tells how many the page really gave, and the difference is
// taken off that refill's weight. A GC every ten thousand allocations
// made pools of few slots a page (160-byte Hashes: 409) read 30% high
// against the smallest (1638 a page) without it.
struct alloc_pool_key {
	__u32 tgid, pad;
	__u64 pool;
};
struct alloc_pool {
	__u32 window, pad;
	__u64 credited, counter;
};
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 12);
	__type(key, struct alloc_pool_key);
	__type(value, struct alloc_pool);
} alloc_pools SEC(".maps");

// alloc_seen: what the slot of an allocation sample holds at its thread's
// next refill, a page of allocations later: the object is built by then
// (the allocation returned long before), and a GC sweep that could have
// freed it and a later allocation that could have reused its slot are
// rare that soon. At the refill itself the slot is still free. User space
// gives the sample (found by pid, tid, window, number and slot) the
// object's class. Refills after a window ended, while its uprobes are being
// taken off, still report the slots of its last samples.
struct alloc_seen {
	__u32 pid, tid;
	__u32 window, seq;
	__u64 slot;
	__u64 flags, klass; // struct RBasic
};
// Its type goes into BTF for bpf2go's -type alloc_seen: no map names it.
const struct alloc_seen *alloc_seen_type __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} alloc_seens SEC(".maps");

// see_slot reports what the slot of the thread's last allocation sample
// holds now, and forgets it.
static __always_inline void see_slot(struct alloc_acc *acc, __u32 tgid, __u32 tid)
{
	__u64 slot = acc->slot;
	if (!slot)
		return;
	acc->slot = 0;
	// Built in the ring, not on the stack: the sample's walk has that.
	struct alloc_seen *e = bpf_ringbuf_reserve(&alloc_seens, sizeof(*e), 0);
	if (!e) {
		count(COUNT_SEEN_ERRORS);
		return;
	}
	e->pid = tgid;
	e->tid = tid;
	e->window = acc->window;
	e->seq = acc->seq;
	e->slot = slot;
	if (bpf_probe_read_user(&e->flags, 2 * sizeof(__u64), (void *)slot)) {
		bpf_ringbuf_discard(e, BPF_RB_NO_WAKEUP);
		return;
	}
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

// refill_weight is the objects a refill of page stands for, free_slots
// free (see alloc_pools).
static __always_inline __u64 refill_weight(struct proc_config *c, __u32 tgid, __u64 page, __u64 free)
{
	__u64 pool = 0, at = c->alloc_counter, counter;
	if (!at && c->alloc_page_pool && c->alloc_pool_counter) {
		if (bpf_probe_read_user(&pool, sizeof(pool), (void *)(page + c->alloc_page_pool - 1)) || !pool)
			return free;
		at = pool + c->alloc_pool_counter - 1;
	}
	if (!at || bpf_probe_read_user(&counter, sizeof(counter), (void *)at))
		return free;
	struct alloc_pool_key key = {.tgid = tgid, .pool = pool};
	struct alloc_pool *last = bpf_map_lookup_elem(&alloc_pools, &key);
	__s64 w = free;
	if (last && last->window == c->alloc_window && counter >= last->counter)
		w += (__s64)(counter - last->counter) - (__s64)last->credited;
	struct alloc_pool now = {.window = c->alloc_window, .credited = free, .counter = counter};
	bpf_map_update_elem(&alloc_pools, &key, &now, BPF_ANY);
	return w > 0 ? w : 0;
}

// The attach cookie of a refill uprobe: the page's register (as x86_64
// numbers them, 0 rax .. 15 r15), the offsets of heap_page free_slots
// and slot_size (16-bit fields), and one more than the offset of its
// freelist where the site still holds the free list's head (0: not).
#define REFILL_REG(c) ((c) & 0xff)
#define REFILL_FREE_SLOTS(c) (((c) >> 8) & 0xffff)
#define REFILL_SLOT_SIZE(c) (((c) >> 24) & 0xffff)
#define REFILL_FREELIST(c) (((c) >> 40) & 0xffff)

// refill_page reads the register the cookie names.
static __always_inline __u64 refill_page(struct pt_regs *ctx, __u64 cookie)
{
#if defined(__TARGET_ARCH_x86)
	switch (REFILL_REG(cookie)) {
	case 0: return BPF_CORE_READ(ctx, ax);
	case 1: return BPF_CORE_READ(ctx, cx);
	case 2: return BPF_CORE_READ(ctx, dx);
	case 3: return BPF_CORE_READ(ctx, bx);
	case 5: return BPF_CORE_READ(ctx, bp);
	case 6: return BPF_CORE_READ(ctx, si);
	case 7: return BPF_CORE_READ(ctx, di);
	case 8: return BPF_CORE_READ(ctx, r8);
	case 9: return BPF_CORE_READ(ctx, r9);
	case 10: return BPF_CORE_READ(ctx, r10);
	case 11: return BPF_CORE_READ(ctx, r11);
	case 12: return BPF_CORE_READ(ctx, r12);
	case 13: return BPF_CORE_READ(ctx, r13);
	case 14: return BPF_CORE_READ(ctx, r14);
	case 15: return BPF_CORE_READ(ctx, r15);
	}
#endif
	return 0; // rsp never holds a page; other architectures are not located yet
}

// alloc_refill is attached to every refill site of a process at once
// (uprobe_multi): attached and detached as one, which the windows need.
SEC("uprobe.multi")
int alloc_refill(struct pt_regs *ctx)
{
	__u64 start = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32, tid = (__u32)pid_tgid;
	struct proc_config *c = bpf_map_lookup_elem(&procs, &tgid);
	if (!c || !c->alloc_every)
		return 0;
	struct alloc_acc *acc = bpf_map_lookup_elem(&alloc_accs, &tid);
	if (acc)
		see_slot(acc, tgid, tid);
	if (!c->alloc_window)
		return 0; // between windows, its uprobes being taken off
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 page = refill_page(ctx, cookie);
	__s16 free = 0, size = 0;
	if (!page || bpf_probe_read_user(&free, sizeof(free), (void *)(page + REFILL_FREE_SLOTS(cookie))) ||
	    bpf_probe_read_user(&size, sizeof(size), (void *)(page + REFILL_SLOT_SIZE(cookie))) || free <= 0 || size <= 0)
		return 0;
	count(COUNT_REFILLS);
	__u64 objects = refill_weight(c, tgid, page, free);
	__u64 now = bpf_ktime_get_ns();
	struct alloc_window *win = bpf_map_lookup_elem(&alloc_windows, &tgid);
	if (win && win->window == c->alloc_window) {
		win->last = now;
		win->refills++;
		win->objects += objects;
	} else {
		struct alloc_window w = {.window = c->alloc_window, .refills = 1, .first = now, .last = now, .objects = objects};
		bpf_map_update_elem(&alloc_windows, &tgid, &w, BPF_ANY);
		win = bpf_map_lookup_elem(&alloc_windows, &tgid);
	}
	if (!acc) {
		struct alloc_acc zero = {};
		bpf_map_update_elem(&alloc_accs, &tid, &zero, BPF_NOEXIST);
		acc = bpf_map_lookup_elem(&alloc_accs, &tid);
		if (!acc)
			goto out;
	}
	acc->objects += objects;
	acc->bytes += objects * size;
	if (acc->objects < c->alloc_every)
		goto out;
	// Read where it is kept, not onto the stack: the sample's walk has that.
	if (!REFILL_FREELIST(cookie) ||
	    bpf_probe_read_user(&acc->slot, sizeof(acc->slot), (void *)(page + REFILL_FREELIST(cookie) - 1)))
		acc->slot = 0;
	acc->window = c->alloc_window;
	acc->seq++;
	if (sample(ctx, c, pid_tgid, acc->objects, PAYLOAD_ALLOC, acc) == 0)
		count(COUNT_ALLOCS);
	else
		acc->slot = 0;
	acc->objects = acc->bytes = 0;
out:
	// The window may have ended meanwhile: then its busy time is left
	// out, as its refill is.
	if (win && win->window == c->alloc_window)
		__sync_fetch_and_add(&win->busy, bpf_ktime_get_ns() - start);
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
	if (sample(ctx, c, pid_tgid, now, flags, NULL) == 0) {
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
