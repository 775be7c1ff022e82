package otelcoltest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// batch builds one profile by hand: a resource with process.pid, one
// samples/count profile whose one sample (value 3) is a one-frame stack in
// function fn. Index 0 of every dictionary table is its zero value, as
// OTLP asks.
func batch(pid int64, fn string) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	dict := pd.Dictionary()
	dict.StringTable().Append("", "samples", "count", fn, "app.rb")
	dict.MappingTable().AppendEmpty()
	dict.FunctionTable().AppendEmpty()
	f := dict.FunctionTable().AppendEmpty()
	f.SetNameStrindex(3)
	f.SetFilenameStrindex(4)
	dict.LocationTable().AppendEmpty()
	line := dict.LocationTable().AppendEmpty().Lines().AppendEmpty()
	line.SetFunctionIndex(1)
	line.SetLine(7)
	dict.StackTable().AppendEmpty()
	dict.StackTable().AppendEmpty().LocationIndices().Append(1)

	rp := pd.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutInt("process.pid", pid)
	p := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	p.SampleType().SetTypeStrindex(1)
	p.SampleType().SetUnitStrindex(2)
	p.SetTime(pcommon.NewTimestampFromTime(time.Now()))
	p.SetDurationNano(uint64(time.Second))
	s := p.Samples().AppendEmpty()
	s.SetStackIndex(1)
	s.Values().Append(3)
	return pd
}

// describe summarizes a received batch as "pid=P type/unit fn=V;…",
// resolving names through its dictionary, so a test compares strings.
func describe(pd pprofile.Profiles) string {
	dict := pd.Dictionary()
	str := func(i int32) string {
		if i < 0 || int(i) >= dict.StringTable().Len() {
			return fmt.Sprintf("<bad string %d>", i)
		}
		return dict.StringTable().At(int(i))
	}
	var b bytes.Buffer
	for _, rp := range pd.ResourceProfiles().All() {
		pid := "<none>"
		if v, ok := rp.Resource().Attributes().Get("process.pid"); ok {
			pid = v.AsString()
		}
		fmt.Fprintf(&b, "pid=%s", pid)
		for _, sp := range rp.ScopeProfiles().All() {
			for _, p := range sp.Profiles().All() {
				fmt.Fprintf(&b, " %s/%s", str(p.SampleType().TypeStrindex()), str(p.SampleType().UnitStrindex()))
				for _, s := range p.Samples().All() {
					b.WriteString(" ")
					for _, li := range dict.StackTable().At(int(s.StackIndex())).LocationIndices().All() {
						for _, l := range dict.LocationTable().At(int(li)).Lines().All() {
							fmt.Fprintf(&b, "%s;", str(dict.FunctionTable().At(int(l.FunctionIndex())).NameStrindex()))
						}
					}
					fmt.Fprintf(&b, "=%v", s.Values().AsRaw())
				}
			}
		}
	}
	return b.String()
}

func grpcClient(t *testing.T, c *Collector) pprofileotlp.GRPCClient {
	t.Helper()
	conn, err := grpc.NewClient(c.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pprofileotlp.NewGRPCClient(conn)
}

func sendGRPC(client pprofileotlp.GRPCClient, pd pprofile.Profiles, opts ...grpc.CallOption) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := client.Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pd), opts...)
	return err
}

// sendHTTP posts the batch as OTLP/HTTP protobuf. The otlp receiver serves
// profiles at /v1development/profiles (fixed: not configurable, unlike the
// other signals' paths). MarshalProto rewrites a mutable batch's resource
// attributes into dictionary references in place (their keys read "" after),
// so the batch must not be used again.
func sendHTTP(c *Collector, pd pprofile.Profiles) error {
	body, err := pprofileotlp.NewExportRequestFromProfiles(pd).MarshalProto()
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post("http://"+c.HTTPAddr+"/v1development/profiles", "application/x-protobuf", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %q", resp.Status, msg)
	}
	return nil
}

func received(t *testing.T, c *Collector) []string {
	t.Helper()
	got, err := c.Received()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, pd := range got {
		out = append(out, describe(pd))
	}
	return out
}

func wantReceived(t *testing.T, c *Collector, want ...string) {
	t.Helper()
	got := received(t, c)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("received:\n  %q\nwant:\n  %q", got, want)
	}
}

func TestReceivesGRPCAndHTTP(t *testing.T) {
	c := Start(t)
	if err := sendGRPC(grpcClient(t, c), batch(101, "Object#over_grpc")); err != nil {
		t.Fatalf("gRPC export: %v", err)
	}
	if err := sendHTTP(c, batch(102, "Object#over_http")); err != nil {
		t.Fatalf("HTTP export: %v", err)
	}
	wantReceived(t, c,
		"pid=101 samples/count Object#over_grpc;=[3]",
		"pid=102 samples/count Object#over_http;=[3]")
}

// TestForwardTo: a collector with ForwardTo passes what it receives on to
// another collector's receiver.
func TestForwardTo(t *testing.T) {
	backend := Start(t)
	front := StartWith(t, Options{ForwardTo: backend.GRPCAddr})
	if err := sendGRPC(grpcClient(t, front), batch(103, "Object#forwarded")); err != nil {
		t.Fatalf("gRPC export: %v", err)
	}
	wantReceived(t, front, "pid=103 samples/count Object#forwarded;=[3]")
	wantReceived(t, backend, "pid=103 samples/count Object#forwarded;=[3]")
}

func TestKillAndRestart(t *testing.T) {
	c := Start(t)
	client := grpcClient(t, c)
	if err := sendGRPC(client, batch(1, "before_kill")); err != nil {
		t.Fatalf("gRPC export: %v", err)
	}
	c.Kill()
	wantReceived(t, c, "pid=1 samples/count before_kill;=[3]")

	if err := sendGRPC(client, batch(2, "while_dead")); err == nil {
		t.Error("gRPC export to a killed collector succeeded")
	}
	if err := sendHTTP(c, batch(2, "while_dead")); err == nil {
		t.Error("HTTP export to a killed collector succeeded")
	}

	c.Restart(t)
	// The same connection, waiting out its reconnection backoff.
	if err := sendGRPC(client, batch(3, "after_restart"), grpc.WaitForReady(true)); err != nil {
		t.Fatalf("gRPC export after restart: %v", err)
	}
	if err := sendHTTP(c, batch(4, "after_restart_http")); err != nil {
		t.Fatalf("HTTP export after restart: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	wantReceived(t, c,
		"pid=1 samples/count before_kill;=[3]",
		"pid=3 samples/count after_restart;=[3]",
		"pid=4 samples/count after_restart_http;=[3]")
}

// TestReceivedIgnoresTornRecord: a record cut short at the end of the file
// (the collector killed mid-write) is not a batch, nor an error.
func TestReceivedIgnoresTornRecord(t *testing.T) {
	body, err := pprofileotlp.NewExportRequestFromProfiles(batch(1, "whole")).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	rec := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	rec = append(rec, body...)
	c := &Collector{out: filepath.Join(t.TempDir(), "profiles.bin")}
	for _, torn := range [][]byte{nil, rec[:2], rec[:4], rec[:len(rec)-1]} {
		if err := os.WriteFile(c.out, append(slices.Clone(rec), torn...), 0o644); err != nil {
			t.Fatal(err)
		}
		wantReceived(t, c, "pid=1 samples/count whole;=[3]")
	}
}
