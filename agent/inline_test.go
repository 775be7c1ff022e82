package agent

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/rubyperf/rubyperf/recording"
)

// inlineReader reads a request's resource attributes the way a consumer
// that knows nothing of string-table references does (Grafana Pyroscope's
// OTLP ingest, 2026-08): keys from KeyValue.key, values as plain strings
// or integers; a key it cannot read is "".
func inlineReader(t *testing.T, b []byte) []map[string]string {
	t.Helper()
	var out []map[string]string
	field := func(b []byte, want protowire.Number, f func(v []byte)) {
		t.Helper()
		if err := eachField(b, func(num protowire.Number, typ protowire.Type, _, v []byte) error {
			if num == want && typ == protowire.BytesType {
				f(v)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	field(b, fieldRequestResourceProfiles, func(rp []byte) {
		attrs := map[string]string{}
		field(rp, fieldResourceProfilesRes, func(res []byte) {
			field(res, fieldResourceAttributes, func(kv []byte) {
				var key, value string
				eachField(kv, func(num protowire.Number, typ protowire.Type, _, v []byte) error {
					switch num {
					case fieldKeyValueKey:
						key = string(v)
					case fieldKeyValueValue:
						eachField(v, func(num protowire.Number, typ protowire.Type, _, v []byte) error {
							switch {
							case num == fieldAnyValueString && typ == protowire.BytesType:
								value = string(v)
							case num == 3 && typ == protowire.VarintType: // AnyValue.int_value
								n, _ := protowire.ConsumeVarint(v)
								value = strconv.FormatInt(int64(n), 10)
							}
							return nil
						})
					}
					return nil
				})
				attrs[key] = value
			})
		})
		out = append(out, attrs)
	})
	return out
}

// TestAttributesInline: every resource attribute of the agent's requests
// has its key and string value inline, read right by a consumer that
// knows nothing of string-table references; and a consumer that does
// (the Collector's decoder) reads the same.
func TestAttributesInline(t *testing.T) {
	start := time.Unix(1700000000, 0)
	iv := NewInterval(start)
	p := &recording.Process{PID: 41, Name: "app.rb", Executable: "/usr/bin/ruby3.3", RubyVersion: "3.3.8"}
	iv.Add(stack(41, fib, times, main_), p)
	iv.End = start.Add(time.Second)
	reqs, err := iv.Requests(Resource{Host: "h1", Labels: map[string]string{"env": "prod"}, Version: "v1"}, 1<<30)
	if err != nil || len(reqs) != 1 {
		t.Fatalf("%d requests: %v", len(reqs), err)
	}
	got := inlineReader(t, reqs[0].Body)
	if len(got) != 1 {
		t.Fatalf("%d resources, want 1", len(got))
	}
	for k, want := range map[string]string{"service.name": "app.rb", "env": "prod", "host.name": "h1",
		"process.runtime.version": "3.3.8", "process.pid": "41"} {
		if got[0][k] != want {
			t.Errorf("resource attribute %q read inline as %q, want %q; all: %q", k, got[0][k], want, got[0])
		}
	}
	if v, ok := got[0][""]; ok {
		t.Errorf("a resource attribute without an inline key (value %q)", v)
	}
	profs := roundTrip(t, iv, Resource{Host: "h1", Labels: map[string]string{"env": "prod"}})
	if r := profs[0].Resource; r["service.name"] != "app.rb" || r["env"] != "prod" || r["process.pid"] != int64(41) {
		t.Errorf("the Collector's decoder reads the resource as %v", r)
	}
}

// TestInlineAttributesOfReferences: what the Collector's encoder writes by
// reference comes out inline and decodes to the same profiles; a request
// already inline comes out unchanged; a reference past the string table
// is an error.
func TestInlineAttributesOfReferences(t *testing.T) {
	pd := pprofile.NewProfiles()
	pd.Dictionary().StringTable().Append("")
	rp := pd.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutStr("service.name", "svc")
	rp.Resource().Attributes().PutInt("process.pid", 7)
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName("s")
	sp.Scope().Attributes().PutStr("scope.key", "scope value")
	sp.Profiles().AppendEmpty()
	b, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		t.Fatal(err)
	}
	if got := inlineReader(t, b); got[0]["service.name"] == "svc" {
		t.Fatalf("the Collector's encoder wrote service.name inline: this test no longer tests the rewrite")
	}
	in, err := inlineAttributes(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := inlineReader(t, in); got[0]["service.name"] != "svc" || got[0]["process.pid"] != "7" {
		t.Errorf("rewritten resource read inline as %q", got[0])
	}
	for _, body := range [][]byte{b, in} {
		back, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(body)
		if err != nil {
			t.Fatal(err)
		}
		res := back.ResourceProfiles().At(0).Resource().Attributes().AsRaw()
		scope := back.ResourceProfiles().At(0).ScopeProfiles().At(0).Scope().Attributes().AsRaw()
		if res["service.name"] != "svc" || res["process.pid"] != int64(7) || scope["scope.key"] != "scope value" {
			t.Errorf("decoded resource %v, scope %v", res, scope)
		}
	}
	again, err := inlineAttributes(in)
	if err != nil || !bytes.Equal(again, in) {
		t.Errorf("an inline request rewritten again changed (%v)", err)
	}
	// A key_strindex (KeyValue field 3) past the table of one string.
	var kv []byte
	kv = protowire.AppendTag(kv, fieldKeyValueKeyStrindex, protowire.VarintType)
	kv = protowire.AppendVarint(kv, 5)
	res := protowire.AppendBytes(protowire.AppendTag(nil, fieldResourceAttributes, protowire.BytesType), kv)
	rpb := protowire.AppendBytes(protowire.AppendTag(nil, fieldResourceProfilesRes, protowire.BytesType), res)
	req := protowire.AppendBytes(protowire.AppendTag(nil, fieldRequestResourceProfiles, protowire.BytesType), rpb)
	if _, err := inlineAttributes(req); !errors.Is(err, errMalformed) {
		t.Errorf("a key index past the string table: %v, want a malformed protobuf", err)
	}
}

// FuzzInlineAttributes: any bytes are rewritten or refused, never a panic;
// what is rewritten is a request the rewrite leaves as it is.
func FuzzInlineAttributes(f *testing.F) {
	start := time.Unix(1700000000, 0)
	iv := NewInterval(start)
	iv.Add(stack(41, fib, times, main_), &recording.Process{PID: 41, Name: "app.rb"})
	iv.End = start.Add(time.Second)
	pd := iv.profilesOf(Resource{Labels: map[string]string{"a": "b"}}, iv.pids())
	b, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := inlineAttributes(b)
		if err != nil {
			return
		}
		again, err := inlineAttributes(out)
		if err != nil {
			t.Fatalf("the rewrite's output is refused: %v", err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("rewriting twice changed the request")
		}
	})
}

// rawReceiver is an OTLP/gRPC profiles receiver on 127.0.0.1 that keeps
// the bytes of each export request it is sent (answering each with an empty
// response), as a backend reads them before any decoding; stopped when the
// test ends.
func rawReceiver(t *testing.T) (addr string, got chan []byte) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got = make(chan []byte, 64)
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var m encoded
		if err := stream.RecvMsg(&m); err != nil {
			return err
		}
		if method, _ := grpc.MethodFromServerStream(stream); method == exportMethod {
			select {
			case got <- m.b:
			default: // the test reads none past the channel's room
			}
		}
		return stream.SendMsg(&encoded{})
	}))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), got
}

// TestGRPCSendsInline: over gRPC the request goes as the agent encoded it,
// its attributes inline (pdata's own client would encode it again, by
// reference), to a server that reads the bytes it was sent.
func TestGRPCSendsInline(t *testing.T) {
	addr, got := rawReceiver(t)
	exp, err := newExporter(Endpoint{Address: addr, Insecure: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	iv := NewInterval(time.Unix(1700000000, 0))
	iv.Add(stack(41, fib, times, main_), &recording.Process{PID: 41, Name: "app.rb"})
	iv.End = iv.Start.Add(time.Second)
	reqs, err := iv.Requests(Resource{}, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exp.Export(context.Background(), reqs[0]); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, reqs[0].Body) {
			t.Errorf("the server got %d bytes, not the %d the agent encoded", len(b), len(reqs[0].Body))
		}
		if attrs := inlineReader(t, b); attrs[0]["service.name"] != "app.rb" {
			t.Errorf("the server reads the resource inline as %q", attrs[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no request within 10 s")
	}
}
