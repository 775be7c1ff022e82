package otelcoltest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

// Source is the collector's module, relative to the repository root.
const Source = "testdata/collector"

// binName is the collector executable's name in its cache directory.
const binName = "otelcol-rubyperf"

// Bounds of the waits on the collector process.
const (
	readyTimeout = 60 * time.Second
	stopTimeout  = 30 * time.Second
)

var (
	buildMu sync.Mutex
	built   = map[string]string{} // release: the binary, once built or found by this process
)

// modFiles are the go.mod and go.sum a release of the collector is built
// with: the module's own for "" (the release rubyperf's go.mod also uses),
// go.RELEASE.mod and go.RELEASE.sum beside them for an older one.
func modFiles(release string) (mod, sum string) {
	if release == "" {
		return "go.mod", "go.sum"
	}
	return "go." + release + ".mod", "go." + release + ".sum"
}

// Build builds the collector, or finds it built, and returns the
// executable's path: $RUBYPERF_CACHE/otelcol/KEY/otelcol-rubyperf, where KEY
// hashes the module's go.mod, go.sum and main.go. Test binaries running in
// parallel take a file lock on the cache directory; the binary is built
// under a temporary name and renamed into place. A failed build fails the
// test with go build's output.
func Build(t testing.TB) string {
	t.Helper()
	return BuildRelease(t, "")
}

// BuildRelease is Build of another release of the upstream collector's
// modules than the one rubyperf builds with: the same main.go with
// go.RELEASE.mod (go build -modfile) in the module's directory.
func BuildRelease(t testing.TB, release string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin := built[release]; bin != "" {
		return bin
	}
	src, err := testruby.RepoPath(Source)
	if err != nil {
		t.Fatalf("otelcoltest: the collector's source: %v", err)
	}
	mod, sum := modFiles(release)
	key := sha256.New()
	for _, name := range []string{mod, sum, "main.go"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatalf("otelcoltest: %v", err)
		}
		fmt.Fprintf(key, "%s %d\n", name, len(b))
		key.Write(b)
	}
	dir := filepath.Join(testruby.Cache(), "otelcol", hex.EncodeToString(key.Sum(nil))[:16])
	bin := filepath.Join(dir, binName)
	if _, err := os.Stat(bin); err == nil {
		built[release] = bin
		return bin
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("otelcoltest: %v", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("otelcoltest: %v", err)
	}
	defer lock.Close() // releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("otelcoltest: lock %s: %v", lock.Name(), err)
	}
	if _, err := os.Stat(bin); err == nil { // another test binary built it
		built[release] = bin
		return bin
	}
	tmp := filepath.Join(dir, fmt.Sprintf("%s.tmp%d", binName, os.Getpid()))
	defer os.Remove(tmp)
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), "go", "build", "-buildvcs=false", "-modfile="+mod, "-o", tmp, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("otelcoltest: building the collector (in %s): go build: %v\n%s", src, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatalf("otelcoltest: %v", err)
	}
	if fi, err := os.Stat(bin); err == nil {
		t.Logf("otelcoltest: built %s with %s in %v (%d MB)", bin, mod, time.Since(start).Round(time.Millisecond), fi.Size()>>20)
	}
	built[release] = bin
	return bin
}

// A Collector is a running collector process (or one killed or stopped,
// which Restart starts again). Its methods are not safe for concurrent use,
// except Received and Log.
type Collector struct {
	GRPCAddr string // OTLP over gRPC, host:port
	HTTPAddr string // OTLP over HTTP, host:port (profiles: POST /v1development/profiles)

	opts                       Options
	bin, dir, config, out, log string
	cmd                        *exec.Cmd
	done                       chan struct{} // closed when cmd has exited
	waitErr                    error         // cmd.Wait's, once done is closed
}

// Start builds (see Build) and starts a collector receiving OTLP profiles on
// free 127.0.0.1 ports, and waits until both its ports accept connections.
// It is killed when the test ends.
func Start(t testing.TB) *Collector {
	t.Helper()
	return StartWith(t, Options{})
}

// Options change how a collector receives.
type Options struct {
	// TLSCertFile and TLSKeyFile, when set, make both receivers TLS only,
	// with this certificate (PEM files).
	TLSCertFile, TLSKeyFile string
	// ForwardTo, when set, is a backend's OTLP/gRPC receiver (host:port,
	// plain text) the collector also sends what it receives to, with the
	// upstream otlp exporter: a collector between the agent and a backend.
	ForwardTo string
	// Release, when set, runs that release of the upstream collector
	// ("v0.162": testdata/collector/go.v0.162.mod) instead of the one
	// rubyperf's go.mod names: a test of what a backend takes from the
	// collectors teams run.
	Release string
}

// tls is the receivers' TLS configuration (YAML, indented for a protocol).
func (c *Collector) tls() string {
	if c.opts.TLSCertFile == "" {
		return ""
	}
	return fmt.Sprintf("\n        tls:\n          cert_file: %q\n          key_file: %q", c.opts.TLSCertFile, c.opts.TLSKeyFile)
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Collector {
	t.Helper()
	bin := BuildRelease(t, opts.Release)
	dir := t.TempDir()
	c := &Collector{opts: opts, bin: bin, dir: dir, config: filepath.Join(dir, "config.yaml"),
		out: filepath.Join(dir, "profiles.bin"), log: filepath.Join(dir, "collector.log")}
	t.Cleanup(func() {
		c.Kill()
		if t.Failed() {
			t.Logf("otelcoltest: collector log, its last %d lines:\n%s", logTail, tail(c.Log(), logTail))
		}
	})
	// A port found free can be taken before the collector binds it: then
	// try others.
	var err error
	for range 3 {
		c.GRPCAddr, c.HTTPAddr = freeAddrs(t)
		if err = os.WriteFile(c.config, []byte(c.configYAML()), 0o644); err != nil {
			t.Fatal(err)
		}
		if err = c.start(); err == nil || !strings.Contains(c.Log(), "address already in use") {
			break
		}
	}
	if err != nil {
		t.Fatalf("otelcoltest: %v\ncollector log:\n%s", err, c.Log())
	}
	return c
}

// Restart starts the collector again, after Kill or Stop (it kills a
// running one first), on the same ports and appending to the same output.
func (c *Collector) Restart(t testing.TB) {
	t.Helper()
	c.Kill()
	t.Cleanup(c.Kill)
	if err := c.start(); err != nil {
		t.Fatalf("otelcoltest: restart: %v\ncollector log:\n%s", err, c.Log())
	}
}

func (c *Collector) configYAML() string {
	fwdConfig, fwdName := c.forwardExporter()
	return fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %q
        include_metadata: true%s
      http:
        endpoint: %q
        include_metadata: true%s
exporters:
  profilefile:
    path: %q
  debug:
    verbosity: basic%s
service:
  telemetry:
    metrics:
      level: none # else it serves Prometheus metrics on :8888
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [profilefile, debug%s]
`, c.GRPCAddr, c.tls(), c.HTTPAddr, c.tls(), c.out, fwdConfig, fwdName)
}

// forwardExporter is the otlp exporter's configuration (YAML, indented
// among the exporters) and its name in the pipeline, when ForwardTo is set.
func (c *Collector) forwardExporter() (config, name string) {
	if c.opts.ForwardTo == "" {
		return "", ""
	}
	return fmt.Sprintf("\n  otlp_grpc:\n    endpoint: %q\n    tls:\n      insecure: true\n    sending_queue:\n      enabled: false", c.opts.ForwardTo), ", otlp_grpc"
}

// start runs the collector and waits for its ports.
func (c *Collector) start() error {
	logf, err := os.OpenFile(c.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== otelcoltest: starting %s at %s\n", c.bin, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.bin, "--config", c.config, "--feature-gates=service.profilesSupport")
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	c.cmd, c.done, c.waitErr = cmd, make(chan struct{}), nil
	go func(done chan struct{}) {
		c.waitErr = cmd.Wait()
		close(done)
	}(c.done)
	deadline := time.Now().Add(readyTimeout)
	for _, addr := range []string{c.GRPCAddr, c.HTTPAddr} {
		for {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
				break
			}
			select {
			case <-c.done:
				return fmt.Errorf("collector exited before listening on %s: %v", addr, c.waitErr)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				c.Kill()
				return fmt.Errorf("collector not listening on %s within %v", addr, readyTimeout)
			}
		}
	}
	return nil
}

// Kill kills the collector (SIGKILL) and waits for it to exit. Batches it
// had accepted stay in its output.
func (c *Collector) Kill() {
	if c.cmd == nil {
		return
	}
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// Stop asks the collector to shut down (SIGTERM) and waits for it, killing
// it after 30 s. It returns the exit error: nil for a clean shutdown.
func (c *Collector) Stop() error {
	if c.cmd == nil {
		return nil
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.waitErr
	case <-time.After(stopTimeout):
		c.Kill()
		return fmt.Errorf("collector still running %v after SIGTERM; killed", stopTimeout)
	}
}

// Received decodes every batch the collector accepted since Start, in the
// order it accepted them. A record cut short (the collector killed while
// writing it, so never acknowledged) is ignored.
func (c *Collector) Received() ([]pprofile.Profiles, error) {
	b, err := os.ReadFile(c.out)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []pprofile.Profiles
	for len(b) >= 4 {
		n := binary.BigEndian.Uint32(b)
		if uint64(len(b)-4) < uint64(n) {
			break
		}
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(b[4 : 4+n]); err != nil {
			return out, fmt.Errorf("%s: record %d: %w", c.out, len(out), err)
		}
		out = append(out, req.Profiles())
		b = b[4+n:]
	}
	return out, nil
}

// Metadata is the metadata (the headers) of every batch the collector
// accepted, in order: a map from lower-case key to values per batch.
func (c *Collector) Metadata() ([]map[string][]string, error) {
	b, err := os.ReadFile(c.out + ".metadata")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []map[string][]string
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var md map[string][]string
		if err := json.Unmarshal(line, &md); err != nil {
			return out, fmt.Errorf("%s.metadata: %w", c.out, err)
		}
		out = append(out, md)
	}
	return out, nil
}

// Log is what the collector printed (each start appending to it).
func (c *Collector) Log() string {
	b, _ := os.ReadFile(c.log)
	return string(b)
}

// logTail bounds the collector's log a failed test prints: its debug
// exporter logs a line per profile, which buried the test's own words.
const logTail = 20

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// freeAddrs returns two 127.0.0.1 addresses with ports free right now.
func freeAddrs(t testing.TB) (string, string) {
	t.Helper()
	var addrs [2]string
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close() // both held open until both are chosen
		addrs[i] = l.Addr().String()
	}
	return addrs[0], addrs[1]
}
