package pyroscopetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

// Env names a Pyroscope binary to use instead of the newest built one.
const Env = "RUBYPERF_PYROSCOPE"

// Binary is the Pyroscope server to run: $RUBYPERF_PYROSCOPE, else the
// newest $RUBYPERF_CACHE/pyroscope/*/pyroscope.
func Binary() (string, error) {
	if p := os.Getenv(Env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$%s: %w", Env, err)
		}
		return p, nil
	}
	bins, _ := filepath.Glob(filepath.Join(testruby.Cache(), "pyroscope", "*", "pyroscope"))
	if len(bins) == 0 {
		return "", fmt.Errorf("no Pyroscope in %s: build one with scripts/pyroscope.sh, or set $%s",
			filepath.Join(testruby.Cache(), "pyroscope"), Env)
	}
	sort.Slice(bins, func(i, j int) bool { return modTime(bins[i]).After(modTime(bins[j])) })
	return bins[0], nil
}

func modTime(p string) time.Time {
	fi, err := os.Stat(p)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// Server is a running Pyroscope.
type Server struct {
	URL  string // http://127.0.0.1:PORT: the HTTP API, the ingest API, and OTLP (HTTP and gRPC, h2c)
	Addr string // 127.0.0.1:PORT of the same
	// Version is the binary's directory name under the cache: the commit
	// it was built from.
	Version string
	log     string
	cmd     *exec.Cmd
}

const readyTimeout = 90 * time.Second

// Start runs Pyroscope on free ports of 127.0.0.1 with its data in a
// temporary directory, and waits until it says it is ready. It is stopped
// when the test ends. A missing binary fails the test.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("pyroscopetest: %v", err)
	}
	dir := t.TempDir()
	s := &Server{Version: filepath.Base(filepath.Dir(bin)), log: filepath.Join(dir, "pyroscope.log")}
	for _, d := range []string{"v1", "shared", "metastore/data", "metastore/raft", "metastore/snapshots", "compactor", "sync", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ports := freePorts(t, 4)
	httpPort, grpcPort, memberPort, raftPort := ports[0], ports[1], ports[2], ports[3]
	const a = "127.0.0.1"
	hp := func(p int) string { return net.JoinHostPort(a, strconv.Itoa(p)) }
	args := []string{
		"-target=all", "-storage.backend=filesystem", "-storage.filesystem.dir=" + filepath.Join(dir, "shared"),
		"-pyroscopedb.data-path=" + filepath.Join(dir, "v1"),
		"-metastore.data-dir=" + filepath.Join(dir, "metastore/data"),
		"-metastore.raft.dir=" + filepath.Join(dir, "metastore/raft"),
		"-metastore.raft.snapshots-dir=" + filepath.Join(dir, "metastore/snapshots"),
		"-compactor.data-dir=" + filepath.Join(dir, "compactor"),
		"-blocks-storage.bucket-store.sync-dir=" + filepath.Join(dir, "sync"),
		"-compaction-worker.temp-dir=" + filepath.Join(dir, "tmp"),
		"-self-profiling.disable-push=true", "-usage-stats.enabled=false", "-tracing.enabled=false",
		// Without it a single binary answers queries with {} ("no v2 data").
		"-enable-query-backend-from=2020-01-01T00:00:00Z",
		"-server.http-listen-address=" + a, "-server.http-listen-port=" + strconv.Itoa(httpPort),
		"-server.grpc-listen-address=" + a, "-server.grpc-listen-port=" + strconv.Itoa(grpcPort),
		"-memberlist.bind-addr=" + a, "-memberlist.bind-port=" + strconv.Itoa(memberPort),
		"-memberlist.advertise-addr=" + a, "-memberlist.advertise-port=" + strconv.Itoa(memberPort),
		"-memberlist.leave-timeout=1s",
		"-metastore.address=" + hp(grpcPort), "-query-backend.address=" + hp(grpcPort),
		"-metastore.raft.bind-address=" + hp(raftPort), "-metastore.raft.advertise-address=" + hp(raftPort),
		"-metastore.raft.server-id=" + hp(raftPort),
		"-distributor.ring.instance-addr=" + a, "-ingester.lifecycler.addr=" + a, "-segment-writer.lifecycler.addr=" + a,
		"-compactor.ring.instance-addr=" + a, "-store-gateway.sharding-ring.instance-addr=" + a,
		"-query-frontend.instance-addr=" + a, "-query-scheduler.ring.instance-addr=" + a,
		"-overrides-exporter.ring.instance-addr=" + a, "-admin-server.http-listen-address=" + a,
		"-ingester.min-ready-duration=0", "-segment-writer.min-ready-duration=0", "-metastore.min-ready-duration=0",
	}
	logf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	s.cmd = exec.Command(bin, args...)
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("pyroscopetest: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("pyroscopetest: log (%s), last lines:\n%s", s.log, s.tail(40))
		}
	})
	s.Addr = hp(httpPort)
	s.URL = "http://" + s.Addr
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := http.Get(s.URL + "/ready")
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), "ready") {
				break
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("pyroscopetest: pyroscope exited before it was ready: %v\n%s", err, s.tail(40))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("pyroscopetest: pyroscope not ready within %s\n%s", readyTimeout, s.tail(40))
		}
	}
	t.Logf("pyroscopetest: Pyroscope %s ready at %s", s.Version, s.URL)
	return s
}

func (s *Server) tail(n int) string {
	b, _ := os.ReadFile(s.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// freePorts returns n ports of 127.0.0.1 free right now, all different.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// connect calls a method of Pyroscope's connect API with a JSON body.
func (s *Server) connect(method string, req, resp any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, err := http.NewRequest(http.MethodPost, s.URL+method, bytes.NewReader(b))
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", "application/json")
	// Label names with dots are listed only to a client that says it reads them.
	r.Header.Set("Accept", "application/json; allow-utf8-labelnames=true")
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", method, res.Status, body)
	}
	return json.Unmarshal(body, resp)
}

// ProfileTypes are the profile types Pyroscope holds between from and
// until, as query ids (NAME:SAMPLE_TYPE:UNIT:PERIOD_TYPE:UNIT).
func (s *Server) ProfileTypes(from, until time.Time) ([]string, error) {
	var resp struct {
		ProfileTypes []struct {
			ID string `json:"ID"`
		} `json:"profileTypes"`
	}
	if err := s.connect("/querier.v1.QuerierService/ProfileTypes", map[string]int64{"start": from.UnixMilli(), "end": until.UnixMilli()}, &resp); err != nil {
		return nil, err
	}
	var out []string
	for _, p := range resp.ProfileTypes {
		out = append(out, p.ID)
	}
	sort.Strings(out)
	return out, nil
}

// LabelNames are the label names of the series matching selector (like
// {service_name="x"}) between from and until.
func (s *Server) LabelNames(selector string, from, until time.Time) ([]string, error) {
	var resp struct {
		Names []string `json:"names"`
	}
	err := s.connect("/querier.v1.QuerierService/LabelNames", map[string]any{"matchers": []string{selector},
		"start": from.UnixMilli(), "end": until.UnixMilli()}, &resp)
	return resp.Names, err
}

// LabelValues are the values of label name in the series matching
// selector between from and until.
func (s *Server) LabelValues(name, selector string, from, until time.Time) ([]string, error) {
	var resp struct {
		Names []string `json:"names"`
	}
	err := s.connect("/querier.v1.QuerierService/LabelValues", map[string]any{"name": name, "matchers": []string{selector},
		"start": from.UnixMilli(), "end": until.UnixMilli()}, &resp)
	return resp.Names, err
}

// Flame is a flame graph Pyroscope rendered: by function name, the value
// of the stacks it is on (Total, each stack once however often the name
// recurs in it) and its own (Self).
type Flame struct {
	Ticks       int64
	Total, Self map[string]int64
}

// Share is name's part of all the flame graph's value, on the stack.
func (f *Flame) Share(name string) float64 {
	if f.Ticks == 0 {
		return 0
	}
	return float64(f.Total[name]) / float64(f.Ticks)
}

// Render is the flame graph of query (PROFILE_TYPE{SELECTOR}) between
// from and until, from Pyroscope's render API.
func (s *Server) Render(query string, from, until time.Time) (*Flame, error) {
	q := url.Values{"query": {query}, "from": {strconv.FormatInt(from.Unix(), 10)},
		"until": {strconv.FormatInt(until.Unix()+1, 10)}, "format": {"json"}}
	res, err := http.Get(s.URL + "/pyroscope/render?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 256<<20))
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("render %s: %s: %s", query, res.Status, body)
	}
	var fb struct {
		Flamebearer struct {
			Names    []string  `json:"names"`
			Levels   [][]int64 `json:"levels"`
			NumTicks int64     `json:"numTicks"`
		} `json:"flamebearer"`
	}
	if err := json.Unmarshal(body, &fb); err != nil {
		return nil, fmt.Errorf("render %s: %w", query, err)
	}
	return flameOf(fb.Flamebearer.Names, fb.Flamebearer.Levels, fb.Flamebearer.NumTicks)
}

// flameOf reads the "single" flamebearer format: each level lists its
// nodes as [offset from the previous node's end, total, self, name index],
// a node's offset placing it under its parent on the level above.
func flameOf(names []string, levels [][]int64, ticks int64) (*Flame, error) {
	f := &Flame{Ticks: ticks, Total: map[string]int64{}, Self: map[string]int64{}}
	type node struct {
		start, end int64
		names      map[string]bool // the names on the stack down to it
	}
	var above []node
	for li, level := range levels {
		if len(level)%4 != 0 {
			return nil, fmt.Errorf("flamebearer level %d: %d numbers, not nodes of 4", li, len(level))
		}
		var here []node
		x := int64(0)
		for i := 0; i < len(level); i += 4 {
			x += level[i]
			total, self, ni := level[i+1], level[i+2], level[i+3]
			if ni < 0 || ni >= int64(len(names)) {
				return nil, fmt.Errorf("flamebearer level %d: name %d of %d", li, ni, len(names))
			}
			name := names[ni]
			n := node{start: x, end: x + total, names: map[string]bool{}}
			for _, p := range above {
				if p.start <= n.start && n.end <= p.end {
					for k := range p.names {
						n.names[k] = true
					}
					break
				}
			}
			if !n.names[name] {
				f.Total[name] += total
			}
			n.names[name] = true
			f.Self[name] += self
			here = append(here, n)
			x += total
		}
		above = here
	}
	return f, nil
}
