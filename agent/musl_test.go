package agent

import (
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/otelcoltest"
	"github.com/rubyperf/rubyperf/internal/testruby"
)

// TestAgentMusl: the agent samples a musl Ruby whose libruby is stripped,
// as an Alpine container runs one, and a real collector gets its profiles
// naming its Ruby methods in the shares they ran.
func TestAgentMusl(t *testing.T) {
	r := testruby.Get(t, "source-3.3-musl-stripped")
	c := otelcoltest.Start(t)
	cmd := testruby.Start(t, r, script("shares.rb"))
	stop, log := startAgent(t, Options{Endpoint: Endpoint{Address: c.GRPCAddr, Protocol: ProtocolGRPC, Insecure: true},
		Interval: 2 * time.Second})
	time.Sleep(5 * time.Second)
	st := stop()
	t.Logf("stats %+v\nlog:\n%s", *st, log)
	var all []otelcoltest.Profile
	for _, profs := range received(t, c) {
		all = append(all, profs...)
	}
	sh, total := shares(all, cmd.Process.Pid, "Shares#heavy", "Shares#light")
	t.Logf("pid %d: %d samples: %v", cmd.Process.Pid, total, sh)
	if h, l := sh["Shares#heavy"], sh["Shares#light"]; total < 40 || h <= l || h+l < 0.9 {
		t.Errorf("pid %d: %d samples, Shares#heavy %.2f, Shares#light %.2f; want 40 or more, about 0.75, 0.25", cmd.Process.Pid, total, h, l)
	}
}
