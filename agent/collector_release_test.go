package agent

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/otelcoltest"
)

// TestCollectorToPyroscope: what an OpenTelemetry Collector forwards of the
// agent's requests (otlp receiver → otlp_grpc exporter), read the way
// Grafana Pyroscope's OTLP ingest reads it, against what a real Pyroscope
// accepted (acceptedFixture). Collector v0.162, the last release whose
// gRPC exporter writes resource attribute keys inline, forwards them so:
// equal to the fixture, the route docs/agent.md's table names. The release
// rubyperf builds with (go.mod) writes them by reference into the string
// table (KeyValue.key_strindex; its gRPC client since v0.163), which that
// Pyroscope reads as empty keys and refuses: asserted too, so that a
// Collector that stops doing it, or a fixture from a Pyroscope that reads
// references, shows here.
func TestCollectorToPyroscope(t *testing.T) {
	accepted := readAccepted(t)
	_, otlp, _ := viewOf(t, fixtureInterval(time.Unix(1700000000, 0)))
	for _, c := range []struct {
		release string // "" is go.mod's
		inline  bool
	}{{"v0.162", true}, {"", false}} {
		name := c.release
		if name == "" {
			name = "go.mod"
		}
		t.Run(name, func(t *testing.T) {
			addr, got := rawReceiver(t)
			col := otelcoltest.StartWith(t, otelcoltest.Options{ForwardTo: addr, Release: c.release})
			exp, err := newExporter(Endpoint{Address: col.GRPCAddr, Insecure: true, Timeout: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer exp.Close()
			for _, r := range otlp {
				// The forward runs inside the receiver's call (no sending
				// queue): when the agent's request is answered, it is sent.
				if _, err := exp.Export(context.Background(), r); err != nil {
					t.Fatalf("the collector refused the agent's request: %v", err)
				}
			}
			var resources []map[string]string
			deadline := time.After(30 * time.Second)
			for len(resources) < len(accepted.OTLPResources) {
				select {
				case body := <-got:
					resources = append(resources, inlineReader(t, body)...)
				case <-deadline:
					t.Fatalf("forwarded %d resources within 30 s, want %d", len(resources), len(accepted.OTLPResources))
				}
			}
			same := reflect.DeepEqual(resources, accepted.OTLPResources)
			switch {
			case c.inline && !same:
				g, _ := json.MarshalIndent(resources, "", "  ")
				t.Errorf("forwarded resources, read as Pyroscope %s reads them, differ from what it accepted:\n%s", accepted.Pyroscope, g)
			case !c.inline && same:
				t.Errorf("this collector forwards resource attribute keys inline: Pyroscope %s takes it directly; "+
					"the docs' table and this test say it does not", accepted.Pyroscope)
			case !c.inline:
				if _, ok := resources[0][""]; !ok {
					t.Errorf("forwarded resources read %q: neither inline nor an empty key", resources[0])
				}
			}
		})
	}
}
