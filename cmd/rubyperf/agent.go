package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/rubyperf/rubyperf/agent"
	"github.com/rubyperf/rubyperf/export"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

// headersEnv is OpenTelemetry's variable for the headers of every OTLP
// request ("key1=value1,key2=value2"): a secret (an API key) comes from the
// environment, never from the command line where ps shows it.
const headersEnv = "OTEL_EXPORTER_OTLP_HEADERS"

func runAgent(args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "the collector's OTLP receiver, HOST:PORT (gRPC 4317, HTTP 4318 by default)")
	protocol := fs.String("protocol", agent.ProtocolGRPC, "grpc or http")
	pyroscope := fs.String("pyroscope", "", "send pprof to Grafana Pyroscope's ingest API at this URL instead of OTLP to a collector: http://HOST:4040")
	var interval seconds = seconds(agent.DefaultInterval)
	fs.Var(&interval, "interval", "one profile per process per interval: seconds, or a duration like 1m")
	freq := fs.Int("F", 99, "samples per second")
	insecure := fs.Bool("insecure", false, "plain text, no TLS (a collector on the same host or network namespace)")
	caFile := fs.String("ca-file", "", "PEM CA bundle to trust instead of the system's")
	certFile := fs.String("cert-file", "", "PEM client certificate, for mutual TLS")
	keyFile := fs.String("key-file", "", "PEM key of the client certificate")
	headers := keyValues{}
	fs.Var(headers, "header", "KEY=VALUE header of every request (repeatable); secrets are better in $"+headersEnv)
	labels := keyValues{}
	fs.Var(labels, "label", "KEY=VALUE resource attribute of every profile (repeatable): deployment.environment=prod")
	service := fs.String("service-name", "", "service.name of every profile (default: each process's name)")
	queue := fs.Int("queue", agent.DefaultQueueSize, "requests held while the collector cannot be reached (one an interval, more for one over 3 MiB); past it the oldest are dropped")
	var flush seconds = seconds(agent.DefaultFlushTimeout)
	fs.Var(&flush, "flush-timeout", "how long a stopping agent tries to send what it holds")
	native := fs.Bool("native", false, "every native frame, the interpreter's own between Ruby frames included")
	rubyOnly := fs.Bool("ruby-only", false, "Ruby frames and C methods only")
	var alloc allocFlag
	fs.Var(&alloc, "alloc", "sample object allocations too: each process's interval has allocation profiles (alloc_objects, alloc_space) beside its CPU one (see record --alloc)")
	live := fs.Bool("live", false, "with --alloc, follow each sampled object until it dies: each interval also has an in-use profile "+
		"(inuse_objects, inuse_space) of the objects proven alive at its end, by allocation stack (OTLP only)")
	match := fs.String("match", "", "sample only the Ruby processes whose command line matches this regular expression (e.g. 'puma|sidekiq')")
	nativeStack := addNativeStackFlags(fs)
	budget := byteSize(agent.DefaultMemoryBudget)
	fs.Var(&budget, "memory-budget", "bytes the agent may hold of what grows with what the Rubies run (names, frames, stacks, the queue): past it, names start afresh and stacks count as over the limit; like 128M")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if env := os.Getenv(headersEnv); env != "" {
		for _, kv := range strings.Split(env, ",") {
			if err := headers.Set(strings.TrimSpace(kv)); err != nil {
				return usageError{fmt.Sprintf("$%s: %v", headersEnv, err)}
			}
		}
	}
	switch {
	case len(pos) > 0:
		return usageError{fmt.Sprintf("unexpected argument %q: the agent samples every Ruby process", pos[0])}
	case *endpoint != "" && *pyroscope != "":
		return usageError{"--endpoint and --pyroscope name two destinations: give one"}
	case *endpoint == "" && *pyroscope == "":
		return usageError{"--endpoint HOST:PORT is required: the collector's OTLP receiver (or --pyroscope URL)"}
	case *protocol != agent.ProtocolGRPC && *protocol != agent.ProtocolHTTP:
		return usageError{fmt.Sprintf("--protocol %q: grpc or http", *protocol)}
	case checkFrequency(*freq) != nil:
		return checkFrequency(*freq)
	case time.Duration(interval) < time.Second:
		return usageError{fmt.Sprintf("--interval %s: at least 1s", time.Duration(interval))}
	case *queue < 1:
		return usageError{fmt.Sprintf("--queue %d: at least 1", *queue)}
	case *native && *rubyOnly:
		return usageError{"--native and --ruby-only ask for opposite views: give one"}
	case *insecure && (*caFile != "" || *certFile != "" || *keyFile != ""):
		return usageError{"--insecure turns TLS off: it cannot go with --ca-file, --cert-file or --key-file"}
	case (*certFile == "") != (*keyFile == ""):
		return usageError{"--cert-file and --key-file go together"}
	case budget < recording.MinMemoryBudget*2:
		return usageError{fmt.Sprintf("--memory-budget %s: at least %s", budget, byteSize(recording.MinMemoryBudget*2))}
	}
	address, how := *endpoint, *protocol
	if *pyroscope != "" {
		u, err := url.Parse(*pyroscope)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			shown := *pyroscope
			if err == nil {
				shown = u.Redacted() // a password given in it stays out of logs
			}
			return usageError{fmt.Sprintf("--pyroscope %q: a URL, e.g. http://localhost:4040", shown)}
		}
		if *insecure {
			return usageError{"--insecure goes with --endpoint: with --pyroscope, an http:// URL is plain text"}
		}
		address, how = *pyroscope, agent.ProtocolPyroscope
		*insecure = u.Scheme == "http"
	} else if _, port, err := net.SplitHostPort(*endpoint); err != nil || port == "" {
		return usageError{fmt.Sprintf("--endpoint %q: HOST:PORT, e.g. localhost:4317", *endpoint)}
	}
	var sel func(int) bool
	if *match != "" {
		re, err := regexp.Compile(*match)
		if err != nil {
			return usageError{fmt.Sprintf("--match: %v", err)}
		}
		sel = func(pid int) bool { return re.MatchString(strings.Join(recording.CommandLine(pid), " ")) }
	}
	view := merge.ViewRuby
	switch {
	case *native:
		view = merge.ViewNative
	case *rubyOnly:
		view = merge.ViewRubyOnly
	}
	opts := agent.Options{
		Endpoint: agent.Endpoint{Address: address, Protocol: how, Insecure: *insecure, CAFile: *caFile,
			CertFile: *certFile, KeyFile: *keyFile, Headers: headers},
		Interval: time.Duration(interval), Frequency: *freq, Merge: merge.Options{View: view},
		Labels: labels, ServiceName: *service, QueueSize: *queue, FlushTimeout: time.Duration(flush),
		Debuginfo: recordFinder(stderr), Version: "rubyperf", Log: export.LineWriter{W: stderr}, Select: sel, MemoryBudget: int64(budget),
		Alloc: uint64(alloc), Live: *live,
	}
	if *live && alloc == 0 {
		return usageError{"--live follows allocated objects: give --alloc too"}
	}
	if *live && how == agent.ProtocolPyroscope {
		return usageError{"--live: in-use profiles go by OTLP (--endpoint); Pyroscope's ingest API takes CPU and allocations"}
	}
	if opts.NativeTables, opts.StackSize, err = nativeStack.options(stderr); err != nil {
		return err
	}
	what := how
	if how == agent.ProtocolPyroscope {
		what = "Pyroscope's ingest API, pprof"
	}
	fmt.Fprintf(stderr, "rubyperf agent: sampling every Ruby process at %d Hz; a profile per process every %s to %s (%s%s)\n",
		*freq, time.Duration(interval), opts.Endpoint.Name(), what, map[bool]string{true: ", plain text", false: ", TLS"}[*insecure])
	limitMemory(budget)
	// SIGINT and SIGTERM (systemd, Kubernetes) stop it: the last interval
	// is cut and sent.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := agent.Run(ctx, opts)
	if err != nil {
		return err
	}
	if st.Unsent > 0 || st.Dropped > 0 {
		return fmt.Errorf("agent: %d requests not sent and %d dropped: the collector at %s could not be reached",
			st.Unsent, st.Dropped, *endpoint)
	}
	return nil
}

// keyValues is a repeatable KEY=VALUE flag.
type keyValues map[string]string

func (kv keyValues) String() string {
	var parts []string
	for k, v := range kv {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (kv keyValues) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("%q is not KEY=VALUE", s)
	}
	kv[strings.TrimSpace(k)] = v
	return nil
}
