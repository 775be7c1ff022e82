package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

// Options configure an agent.
type Options struct {
	Endpoint  Endpoint
	Interval  time.Duration // one profile per process per interval; default 10 s
	Frequency int           // samples per second; default 99
	StackSize int           // as recording.Options.StackSize
	// NativeTables is recording.Options.NativeTables.
	NativeTables bool
	// Alloc samples allocations too (recording.Options.Alloc): each
	// process's interval then has an allocation profile beside its CPU one.
	Alloc uint64
	// Live follows each allocation sample's object (recording.Options.Live):
	// each interval then also has an in-use profile (inuse_objects,
	// inuse_space) of the objects proven alive at its end, by allocation
	// stack. OTLP only.
	Live  bool
	Merge merge.Options // the view: which native frames profiles keep
	// Labels are resource attributes of every profile (--label); an
	// attribute the agent sets itself (process.pid, ...) is not replaced.
	Labels      map[string]string
	ServiceName string // every profile's service.name; default: each process's name
	// QueueSize bounds the requests held while the collector cannot be
	// reached (one an interval, more for an interval over MaxRequestBytes),
	// QueueBytes their encoded size; past either, the oldest go.
	QueueSize  int
	QueueBytes int
	// FlushTimeout bounds how long a stopping agent tries to send what it
	// holds; default 10 s.
	FlushTimeout time.Duration
	Debuginfo    *debuginfo.Finder
	// Select, if set, narrows the Ruby processes sampled to those it says
	// yes to (their forked children too).
	Select func(pid int) bool
	// MemoryBudget bounds, in bytes, what the agent holds that grows with
	// what the Rubies run (default DefaultMemoryBudget): half for the
	// recording's names and frames (recording.Options.MemoryBudget), an
	// eighth for the interval being taken, a quarter at most for the
	// queue (QueueBytes). Past a share, the recording starts its names
	// afresh and an interval counts new stacks under OverLimitName.
	MemoryBudget int64
	Version      string    // rubyperf's, for the instrumentation scope
	Log          io.Writer // a line per interval, and one per change of the collector's state
}

// Defaults.
const (
	DefaultInterval     = 10 * time.Second
	DefaultQueueSize    = 60       // ten minutes of 10 s intervals
	DefaultQueueBytes   = 64 << 20 // encoded
	DefaultFlushTimeout = 10 * time.Second
	maxBackoff          = 30 * time.Second
	// DefaultMemoryBudget leaves room under the shipped systemd unit's
	// MemoryMax=256M for what the agent holds besides (rings, code,
	// runtime): see deploy/systemd.
	DefaultMemoryBudget = 96 << 20
)

// Stats count what an agent did.
type Stats struct {
	Intervals uint64 // intervals cut with samples in them
	// Requests they were sent as (more than one an interval when its
	// encoding is over MaxRequestBytes); Sent those the collector accepted.
	Requests, Sent uint64
	// Dropped were pushed out of the queue by newer ones while the
	// collector could not be reached; DroppedSamples their samples.
	Dropped, DroppedSamples uint64
	// Rejected the collector refused for good (or in part: RejectedProfiles).
	Rejected, RejectedProfiles uint64
	Unsent                     int    // still queued when the agent stopped
	Retries                    uint64 // failed attempts that were tried again
	Samples                    uint64 // samples profiled
	Lost                       uint64 // samples the kernel dropped (rings full)
	OverLimit                  uint64 // samples counted under OverLimitName
	Processes                  int    // Ruby processes sampled
}

func plural(n int, one, more string) string {
	if n == 1 {
		return one
	}
	return more
}

// agent is one running agent.
type agent struct {
	opts Options
	res  Resource
	exp  exporter
	q    *queue
	log  io.Writer

	mu sync.Mutex // guards iv and inUse
	iv *Interval
	// inUse keeps the stacks of the allocation samples whose objects the
	// recording follows (Options.Live), and liveView asks it which are
	// alive; nil without Live.
	inUse    *inUse
	liveView *recording.LiveView

	containers sync.Map // pid -> container id, read once per process
	progress   atomic.Pointer[recording.Progress]

	stats   Stats // counters the sender and cutter update, under statsMu
	statsMu sync.Mutex
	down    atomic.Bool // the collector cannot be reached now
	// refusals counts this interval's refusals by their message
	// (refusalKey): each is logged once an interval, the rest counted in
	// the interval's line (under statsMu).
	refusals  map[string]int
	downSince time.Time

	cpu cpuClock
	// flushing is closed when sampling has stopped: a sender waiting to
	// try again tries at once.
	flushing chan struct{}
}

// Run samples every Ruby process until ctx ends, and sends a profile of
// each per interval to the collector. It returns what it did when it
// stopped: the last interval is cut and sent, within FlushTimeout.
func Run(ctx context.Context, opts Options) (*Stats, error) {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Frequency <= 0 {
		opts.Frequency = 99
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.MemoryBudget <= 0 {
		opts.MemoryBudget = DefaultMemoryBudget
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = int(min(DefaultQueueBytes, opts.MemoryBudget/4))
	}
	if opts.FlushTimeout <= 0 {
		opts.FlushTimeout = DefaultFlushTimeout
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	// A collector back from an outage is tried again within an interval
	// (and within maxBackoff): the queue holds an interval a request.
	if opts.Endpoint.MaxRetryDelay <= 0 {
		opts.Endpoint.MaxRetryDelay = min(opts.Interval, maxBackoff)
	}
	exp, err := newExporter(opts.Endpoint)
	if err != nil {
		return nil, err
	}
	defer exp.Close()
	host, _ := os.Hostname()
	a := &agent{opts: opts, exp: exp, q: newQueue(opts.QueueSize, opts.QueueBytes), log: opts.Log,
		res: Resource{Host: host, Labels: opts.Labels, ServiceName: opts.ServiceName,
			Period: int64(time.Second) / int64(opts.Frequency), Version: opts.Version}}
	start := time.Now()
	a.iv = a.newInterval(start)
	if opts.Live && opts.Alloc > 0 {
		a.inUse, a.liveView = newInUse(), &recording.LiveView{}
	}
	a.flushing = make(chan struct{})
	a.cpu.sample()

	// The sender runs until the flush after sampling stops.
	sendCtx, stopSending := context.WithCancel(context.Background())
	defer stopSending()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		a.send(sendCtx)
	}()

	recCtx, stopRecording := context.WithCancel(ctx)
	defer stopRecording()
	type result struct {
		sum *recording.Summary
		err error
	}
	recorded := make(chan result, 1)
	go func() {
		sum, err := recording.Record(recCtx, recording.Options{All: true, Select: opts.Select, Frequency: opts.Frequency, Alloc: opts.Alloc,
			Live: opts.Live && opts.Alloc > 0, LiveView: a.liveView, StackSize: opts.StackSize, NativeTables: opts.NativeTables,
			Debuginfo: opts.Debuginfo, Warn: opts.Log, Merge: opts.Merge, Stacks: a.take, MemoryBudget: opts.MemoryBudget / 2,
			Progress: func(p recording.Progress) {
				if a.progress.Swap(&p) == nil {
					fmt.Fprintf(a.log, "rubyperf agent: sampling started, %d Ruby %s\n", p.Targets, plural(p.Targets, "process", "processes"))
				}
			}})
		recorded <- result{sum, err}
	}()

	tick := time.NewTicker(opts.Interval)
	defer tick.Stop()
	var res result
loop:
	for {
		select {
		case <-tick.C:
			a.cut(time.Now())
		case res = <-recorded:
			break loop
		}
	}
	if res.err != nil && a.progress.Load() == nil {
		return nil, res.err // it never sampled: nothing to send or say
	}
	a.cut(time.Now()) // what the last interval has
	// Flush: send what is queued, within FlushTimeout.
	close(a.flushing)
	deadline := time.After(opts.FlushTimeout)
flush:
	for n, _, _ := a.q.stats(); n > 0; n, _, _ = a.q.stats() {
		select {
		case <-deadline:
			break flush
		case <-time.After(20 * time.Millisecond):
		}
	}
	stopSending()
	<-sent
	a.statsMu.Lock()
	st := a.stats
	a.statsMu.Unlock()
	st.Unsent, st.Dropped, st.DroppedSamples = a.q.stats()
	if res.sum != nil {
		st.Lost = res.sum.Lost
		st.Processes = res.sum.Targets
	}
	fmt.Fprintf(a.log, "rubyperf agent: stopped after %s: %d intervals in %d requests, %d sent, %d dropped while the collector was unreachable, %d rejected, %d unsent\n",
		time.Since(start).Round(time.Second), st.Intervals, st.Requests, st.Sent, st.Dropped, st.Rejected, st.Unsent)
	if res.err != nil && !errors.Is(res.err, context.Canceled) {
		return &st, res.err
	}
	return &st, nil
}

func (a *agent) newInterval(start time.Time) *Interval {
	iv := NewInterval(start)
	iv.ContainerOf = a.containerOf
	iv.maxBytes = a.opts.MemoryBudget / 8
	return iv
}

// take counts one sample (recording.Options.Stacks: the recording's lock
// is held; this one is held only to add it).
func (a *agent) take(st merge.Stack, p *recording.Process) {
	a.mu.Lock()
	a.iv.Add(st, p)
	if st.Alloc && a.inUse != nil {
		a.inUse.add(st, p)
	}
	a.mu.Unlock()
}

// containerOf is the container of pid, read once per process.
func (a *agent) containerOf(pid int) string {
	if id, ok := a.containers.Load(pid); ok {
		return id.(string)
	}
	id := ContainerID(pid)
	a.containers.Store(pid, id)
	return id
}

// cut ends the interval at now, queues its profiles, and logs a line.
func (a *agent) cut(now time.Time) {
	var alive followed
	if a.inUse != nil {
		alive = followedNow(a.liveView) // the recording's lock: before ours
	}
	a.mu.Lock()
	iv := a.iv
	if a.inUse != nil {
		a.inUse.cut(alive, iv)
	}
	a.iv = a.newInterval(now)
	a.mu.Unlock()
	iv.End = now
	procs := len(iv.Procs)
	// Containers of processes that had no sample this interval are read
	// again if they come back (a pid may be reused).
	a.containers.Range(func(k, _ any) bool {
		if _, ok := iv.Procs[k.(int)]; !ok {
			a.containers.Delete(k)
		}
		return true
	})
	dropped := 0
	var encodeErr error
	if iv.Samples > 0 || iv.InUse > 0 {
		var reqs []Request
		var err error
		if a.opts.Endpoint.Protocol == ProtocolPyroscope {
			reqs, err = iv.pyroscopeRequests(a.res)
		} else {
			reqs, err = iv.Requests(a.res, MaxRequestBytes)
		}
		if err != nil {
			encodeErr = err
		}
		for _, r := range reqs {
			dropped += a.q.push(queued{req: r})
		}
		a.statsMu.Lock()
		a.stats.Intervals++
		a.stats.Requests += uint64(len(reqs))
		a.statsMu.Unlock()
	}
	a.statsMu.Lock()
	a.stats.Samples += iv.Samples
	a.stats.OverLimit += iv.OverLimit
	sent, refused := a.stats.Sent, a.stats.Rejected
	refusedProfiles := a.stats.RejectedProfiles
	repeats := 0 // refusals not logged this interval: their message was
	for _, n := range a.refusals {
		repeats += n - 1
	}
	if n := a.refusals[""]; n > 0 {
		repeats++ // past maxRefusalKinds: none of them was logged
	}
	clear(a.refusals)
	a.statsMu.Unlock()
	waiting, droppedAll, _ := a.q.stats()
	var lost, overBudget uint64
	restarted := 0
	if p := a.progress.Load(); p != nil {
		lost, overBudget, restarted = p.Lost, p.FramesOverBudget, p.NamesRestarted
	}
	rss, cpu := rssBytes(), a.cpu.sample()
	line := fmt.Sprintf("rubyperf agent: %s +%s: %d %s, %d samples, %d lost so far; sent %d, queued %d/%d, dropped %d",
		iv.Start.UTC().Format(time.RFC3339), now.Sub(iv.Start).Round(time.Millisecond), procs, plural(procs, "process", "processes"), iv.Samples, lost,
		sent, waiting, a.opts.QueueSize, droppedAll)
	if refused > 0 || refusedProfiles > 0 {
		line += fmt.Sprintf(", refused %d so far", refused)
		if refusedProfiles > 0 {
			line += fmt.Sprintf(" (and %d profiles of requests taken)", refusedProfiles)
		}
		if repeats > 0 {
			line += fmt.Sprintf(", %d refusals this interval not logged again", repeats)
		}
	}
	if iv.OverLimit > 0 {
		line += fmt.Sprintf(", %d samples over the stack limit", iv.OverLimit)
	}
	if overBudget > 0 || restarted > 0 {
		line += fmt.Sprintf(", names over the memory budget so far: %d frames named coarser, %d restarts", overBudget, restarted)
	}
	line += fmt.Sprintf("; rss %d MiB, cpu %.1f%%", rss>>20, cpu*100)
	if a.down.Load() {
		line += "; collector unreachable, trying again"
	}
	if dropped > 0 {
		line += fmt.Sprintf("; dropped the %d oldest queued", dropped)
	}
	if encodeErr != nil {
		line += "; could not encode: " + encodeErr.Error()
	}
	fmt.Fprintln(a.log, line)
}

// refused counts a backend's refusal, saying whether it is the first with
// its message this interval (the one to log).
func (a *agent) refused(err error) bool {
	a.statsMu.Lock()
	defer a.statsMu.Unlock()
	if a.refusals == nil {
		a.refusals = map[string]int{}
	}
	k := refusalKey(err)
	if len(a.refusals) >= maxRefusalKinds && a.refusals[k] == 0 {
		k = "" // past the bound, counted together, not logged
	}
	a.refusals[k]++
	return k != "" && a.refusals[k] == 1
}

// maxRefusalKinds bounds the distinct refusal messages an interval logs.
const maxRefusalKinds = 16

// send sends the queued requests, oldest first, until ctx ends, retrying
// with backoff while the collector cannot be reached.
func (a *agent) send(ctx context.Context) {
	backoff := min(time.Second, a.opts.Endpoint.MaxRetryDelay)
	for {
		it, ok := a.q.peek()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-a.q.ready:
				continue
			}
		}
		rejected, err := a.exp.Export(ctx, it.req)
		switch {
		case err == nil || isPermanent(err) || rejected > 0:
			a.q.pop(it)
			a.statsMu.Lock()
			if err == nil {
				a.stats.Sent++
			} else if rejected > 0 {
				a.stats.Sent++
				a.stats.RejectedProfiles += uint64(rejected)
			} else {
				a.stats.Rejected++
			}
			a.statsMu.Unlock()
			if err != nil && a.refused(err) {
				fmt.Fprintf(a.log, "rubyperf agent: %s: %v\n", a.opts.Endpoint.Name(), err)
			}
			if a.down.Swap(false) {
				fmt.Fprintf(a.log, "rubyperf agent: %s: reachable again after %s\n", a.opts.Endpoint.Name(),
					time.Since(a.downSince).Round(time.Second))
			}
			backoff = min(time.Second, a.opts.Endpoint.MaxRetryDelay)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if !a.down.Swap(true) {
			a.downSince = time.Now()
			fmt.Fprintf(a.log, "rubyperf agent: %s: cannot send (%v); holding up to %d requests and trying again\n",
				a.opts.Endpoint.Name(), err, a.opts.QueueSize)
		}
		a.statsMu.Lock()
		a.stats.Retries++
		a.statsMu.Unlock()
		// Jittered, so a fleet that lost its collector does not come back at once.
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, a.opts.Endpoint.MaxRetryDelay)
		select {
		case <-ctx.Done():
			return
		case <-a.flushing:
			// Stopping: try at once, then every half second.
			backoff = time.Second
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(wait, 500*time.Millisecond)):
			}
		case <-time.After(wait):
		}
	}
}
