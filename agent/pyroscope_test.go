package agent

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

// ingested is what a server on Pyroscope's ingest path was sent.
type ingested struct {
	query url.Values
	prof  *profile.Profile
}

// ingestServer answers POST /ingest with status, keeping what it parsed.
func ingestServer(t *testing.T, status int, body string) (*httptest.Server, func() []ingested) {
	t.Helper()
	var mu sync.Mutex
	var got []ingested
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != ingestPath {
			http.Error(w, "not here", http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		p, err := profile.ParseData(b)
		if err != nil {
			http.Error(w, "not a pprof: "+err.Error(), http.StatusUnprocessableEntity)
			return
		}
		mu.Lock()
		got = append(got, ingested{r.URL.Query(), p})
		mu.Unlock()
		if status != http.StatusOK {
			http.Error(w, body, status)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() []ingested { mu.Lock(); defer mu.Unlock(); return append([]ingested(nil), got...) }
}

// TestPyroscopeRequests: an interval goes to Pyroscope's ingest API as one
// pprof per process, its series named by the service and the process's
// attributes, the samples counted with their thread and request labels.
func TestPyroscopeRequests(t *testing.T) {
	start := time.Unix(1700000000, 0)
	iv := NewInterval(start)
	p1 := &recording.Process{PID: 1, Name: "app.rb", Executable: "/usr/bin/ruby3.3", RubyVersion: "3.3.8"}
	p2 := &recording.Process{PID: 2, Name: "worker {1}, a=b", Executable: "/usr/bin/ruby3.1"}
	for range 3 {
		iv.Add(stack(1, fib, times, main_), p1)
	}
	st := stack(1, memcp, times, main_)
	st.Labels = []merge.Label{{Key: "endpoint", Value: "users"}}
	iv.Add(st, p1)
	iv.Add(stack(2, sysc, main_), p2)
	iv.End = start.Add(10 * time.Second)
	res := Resource{Host: "h1", Labels: map[string]string{"deployment.environment": "prod", "9x": "y"}, Period: 10101010}
	srv, got := ingestServer(t, http.StatusOK, "")
	exp, err := newExporter(Endpoint{Address: srv.URL + "/", Protocol: ProtocolPyroscope, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	reqs, err := iv.pyroscopeRequests(res)
	if err != nil || len(reqs) != 2 {
		t.Fatalf("%d requests (%v), want one per process", len(reqs), err)
	}
	for _, r := range reqs {
		if _, err := exp.Export(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	in := got()
	if len(in) != 2 {
		t.Fatalf("the server took %d requests, want 2", len(in))
	}
	q := in[0].query
	wantName := "app.rb{_x=y,deployment_environment=prod,host_name=h1,process_command=app.rb,process_executable_name=ruby3.3," +
		"process_executable_path=/usr/bin/ruby3.3,process_pid=1,process_runtime_name=ruby,process_runtime_version=3.3.8}"
	if q.Get("name") != wantName || q.Get("format") != "pprof" || q.Get("from") != "1700000000" ||
		q.Get("until") != "1700000010" || q.Get("sampleRate") != "99" {
		t.Errorf("query %v\nwant name %s", q, wantName)
	}
	if n := in[1].query.Get("name"); !strings.HasPrefix(n, "worker _1__ a_b{") {
		t.Errorf("a service name with the name's delimiters in it: %q", n)
	}
	p := in[0].prof
	if len(p.SampleType) != 2 || p.SampleType[1].Type != "cpu" || p.Period != 10101010 || p.TimeNanos != start.UnixNano() ||
		p.DurationNanos != int64(10*time.Second) {
		t.Errorf("profile header: types %v period %d time %d duration %d", p.SampleType, p.Period, p.TimeNanos, p.DurationNanos)
	}
	counts := map[string]int64{}
	for _, s := range p.Sample {
		var names []string
		for _, l := range s.Location {
			names = append(names, l.Line[0].Function.Name)
		}
		counts[strings.Join(names, ";")] += s.Value[0]
		if s.Value[1] != s.Value[0]*10101010 {
			t.Errorf("sample %v: cpu %d for %d samples", names, s.Value[1], s.Value[0])
		}
		if s.Label["thread"][0] != "main" || s.Label["thread_state"][0] != "ruby" || len(s.Label["tid"]) != 0 || len(s.Label["pid"]) != 0 {
			t.Errorf("sample %v labels %v: want thread and state, no ids", names, s.Label)
		}
		if names[0] == "memcpy" && s.Label["endpoint"][0] != "users" {
			t.Errorf("the request label of the memcpy sample: %v", s.Label)
		}
	}
	if counts["Fib.fib;Integer#times;<main>"] != 3 || counts["memcpy;Integer#times;<main>"] != 1 || len(counts) != 2 {
		t.Errorf("samples of pid 1: %v", counts)
	}
}

// TestPyroscopeRefusal: a refusal is permanent, and says the server's
// message; a server that is overloaded is tried again.
func TestPyroscopeRefusal(t *testing.T) {
	iv := NewInterval(time.Unix(1700000000, 0))
	iv.Add(stack(1, fib), &recording.Process{PID: 1, Name: "app.rb"})
	iv.End = iv.Start.Add(time.Second)
	reqs, err := iv.pyroscopeRequests(Resource{Period: 1e7})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		status    int
		permanent bool
	}{{http.StatusBadRequest, true}, {http.StatusServiceUnavailable, false}} {
		srv, _ := ingestServer(t, tc.status, "invalid labels: service_name too long")
		exp, err := newExporter(Endpoint{Address: "http://user:secret@" + strings.TrimPrefix(srv.URL, "http://"), Protocol: ProtocolPyroscope, Insecure: true})
		if err != nil {
			t.Fatal(err)
		}
		_, err = exp.Export(context.Background(), reqs[0])
		if err == nil || isPermanent(err) != tc.permanent || !strings.Contains(err.Error(), "service_name too long") {
			t.Errorf("status %d: %v (permanent %v), want the server's message, permanent %v", tc.status, err, isPermanent(err), tc.permanent)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the refusal shows the URL's password: %v", err)
		}
		exp.Close()
	}
	for _, bad := range []string{"localhost:4040", "ftp://h/", "http:///x", "http://h:4040/?a=b"} {
		if _, err := newExporter(Endpoint{Address: bad, Protocol: ProtocolPyroscope}); err == nil {
			t.Errorf("pyroscope URL %q taken", bad)
		}
	}
}
