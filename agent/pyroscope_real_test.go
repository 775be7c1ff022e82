//go:build pyroscope

package agent

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/pyroscopetest"
)

// TestPyroscopeAccepts: a real Grafana Pyroscope accepts fixtureInterval's
// requests over OTLP/gRPC, OTLP/HTTP and its ingest API, and files them
// under the service's name with the process's attributes; -update writes
// what it accepted, as Pyroscope reads it, to acceptedFixture.
func TestPyroscopeAccepts(t *testing.T) {
	srv := pyroscopetest.Start(t)
	start := time.Now().Add(-2 * time.Second) // Pyroscope refuses profiles from the future, and older than an hour
	iv := fixtureInterval(start)
	view, otlp, ingest := viewOf(t, iv)
	for _, c := range []struct {
		e    Endpoint
		reqs []Request
	}{
		{Endpoint{Address: srv.Addr, Protocol: ProtocolGRPC, Insecure: true}, otlp},
		{Endpoint{Address: srv.Addr, Protocol: ProtocolHTTP, Insecure: true}, otlp},
		{Endpoint{Address: srv.URL, Protocol: ProtocolPyroscope, Insecure: true}, ingest},
	} {
		exp, err := newExporter(c.e)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range c.reqs {
			if _, err := exp.Export(context.Background(), r); err != nil {
				t.Errorf("%s: refused: %v", c.e.Protocol, err)
			}
		}
		exp.Close()
	}
	from, until := start.Add(-time.Minute), time.Now().Add(time.Minute)
	for _, svc := range []string{"fixture-app.rb", "fixture-worker.rb"} {
		sel := fmt.Sprintf(`{service_name=%q}`, svc)
		var pids []string
		deadline := time.Now().Add(30 * time.Second)
		for len(pids) == 0 && time.Now().Before(deadline) {
			time.Sleep(500 * time.Millisecond)
			pids, _ = srv.LabelValues("process.pid", sel, from, until)
		}
		want := map[string]string{"fixture-app.rb": "101", "fixture-worker.rb": "102"}[svc]
		if !slices.Contains(pids, want) {
			t.Errorf("%s: process.pid values %q, want %s", svc, pids, want)
		}
		envs, err := srv.LabelValues("deployment_environment", sel, from, until)
		if err != nil || !slices.Contains(envs, "test") {
			t.Errorf("%s: deployment_environment (the ingest API's) values %q (%v), want test", svc, envs, err)
		}
	}
	if *update && !t.Failed() {
		view.Pyroscope = srv.Version
		writeAccepted(t, view)
		t.Logf("wrote %s", acceptedFixture)
	}
}
