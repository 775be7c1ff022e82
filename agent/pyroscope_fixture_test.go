package agent

import (
	"encoding/json"
	"flag"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

var update = flag.Bool("update", false, "rewrite testdata/pyroscope-accepted.json from a real Pyroscope (with -tags pyroscope)")

// acceptedFixture is what a real Grafana Pyroscope accepted of the agent's
// requests, as Pyroscope reads them: written by TestPyroscopeAccepts
// (-tags pyroscope -update), checked in every run by TestPyroscopeFixture.
const acceptedFixture = "testdata/pyroscope-accepted.json"

// pyroscopeView is the agent's requests for fixtureInterval as Pyroscope
// reads them, and which Pyroscope accepted them so.
type pyroscopeView struct {
	Pyroscope string `json:"pyroscope"` // the commit of the Pyroscope that accepted them
	// OTLPResources are the OTLP requests' resource attributes, read as
	// Pyroscope's OTLP ingest reads them (inline keys and values only).
	OTLPResources []map[string]string `json:"otlp_resources"`
	// Ingest are the queries of the pprof requests to its ingest API.
	Ingest []map[string]string `json:"ingest"`
}

// fixtureInterval is an interval of two processes, one with a request
// label, as the agent would cut it at start.
func fixtureInterval(start time.Time) *Interval {
	iv := NewInterval(start)
	p1 := &recording.Process{PID: 101, Name: "fixture-app.rb", Executable: "/usr/bin/ruby3.3", RubyVersion: "3.3.8"}
	p2 := &recording.Process{PID: 102, Name: "fixture-worker.rb", Executable: "/usr/bin/ruby3.1", RubyVersion: "3.1.7"}
	for range 3 {
		iv.Add(stack(101, fib, times, main_), p1)
	}
	st := stack(101, memcp, times, main_)
	st.Labels = []merge.Label{{Key: "endpoint", Value: "users"}}
	iv.Add(st, p1)
	iv.Add(stack(102, sysc, memcp, times, main_), p2)
	iv.End = start.Add(2 * time.Second)
	return iv
}

var fixtureResource = Resource{Host: "fixture-host", Labels: map[string]string{"deployment.environment": "test"},
	Period: 10101010, Version: "fixture"}

// viewOf encodes iv both ways and reads the requests as Pyroscope does.
func viewOf(t *testing.T, iv *Interval) (pyroscopeView, []Request, []Request) {
	t.Helper()
	otlp, err := iv.Requests(fixtureResource, MaxRequestBytes)
	if err != nil {
		t.Fatal(err)
	}
	ingest, err := iv.pyroscopeRequests(fixtureResource)
	if err != nil {
		t.Fatal(err)
	}
	var v pyroscopeView
	for _, r := range otlp {
		v.OTLPResources = append(v.OTLPResources, inlineReader(t, r.Body)...)
	}
	for _, r := range ingest {
		q, err := url.ParseQuery(r.Query)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for k := range q {
			if k != "from" && k != "until" { // when it was sent
				m[k] = q.Get(k)
			}
		}
		v.Ingest = append(v.Ingest, m)
	}
	return v, otlp, ingest
}

// TestPyroscopeFixture: the agent's requests read, the way Pyroscope reads
// them, the same as those a real Pyroscope accepted (acceptedFixture): no
// change to the encoding goes unseen where no Pyroscope can run (CI).
func TestPyroscopeFixture(t *testing.T) {
	want := readAccepted(t)
	got, _, _ := viewOf(t, fixtureInterval(time.Unix(1700000000, 0)))
	got.Pyroscope = want.Pyroscope
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		t.Errorf("the agent's requests, read as Pyroscope reads them, differ from what Pyroscope %s accepted (%s):\n%s",
			want.Pyroscope, acceptedFixture, g)
	}
	if len(want.OTLPResources) == 0 || len(want.Ingest) == 0 || want.Pyroscope == "" {
		t.Errorf("%s holds no accepted request", acceptedFixture)
	}
}

// readAccepted reads the fixture.
func readAccepted(t *testing.T) pyroscopeView {
	t.Helper()
	b, err := os.ReadFile(acceptedFixture)
	if err != nil {
		t.Fatal(err)
	}
	var v pyroscopeView
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", acceptedFixture, err)
	}
	return v
}

// writeAccepted writes the fixture.
func writeAccepted(t *testing.T, v pyroscopeView) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(acceptedFixture), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(acceptedFixture, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
