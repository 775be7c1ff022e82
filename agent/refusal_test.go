package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestResponseMessage: a backend's message, from each body a refusal
// comes with, on one bounded line.
func TestResponseMessage(t *testing.T) {
	st, err := proto.Marshal(&spb.Status{Code: 3, Message: "invalid labels:\n  label name ''"})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", maxRefusalBytes)
	for _, c := range []struct {
		name, contentType string
		body              []byte
		want              string
	}{
		{"OTLP's status, protobuf", "application/x-protobuf", st, "invalid labels: label name ''"},
		{"OTLP's status, JSON", "application/json; charset=utf-8", []byte(`{"code":3,"message":"bad\tprofile"}`), "bad profile"},
		{"plain text (Pyroscope)", "text/plain; charset=utf-8", []byte("invalid labels '{=\"706\"}' with error: invalid label name ''\n"),
			"invalid labels '{=\"706\"}' with error: invalid label name ''"},
		{"JSON without a message", "application/json", []byte(`{"error":"x"}`), `{"error":"x"}`},
		{"control bytes", "", []byte("a\x00\x1b[31mb"), "a [31mb"},
		{"empty", "text/plain", nil, ""},
		{"long", "text/plain", []byte(long), strings.Repeat("é", maxRefusalBytes/2) + "…"},
	} {
		if got := responseMessage(c.contentType, c.body); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// refusingGRPC refuses every request, as a backend that cannot read it.
type refusingGRPC struct {
	pprofileotlp.UnimplementedGRPCServer
}

func (*refusingGRPC) Export(context.Context, pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	return pprofileotlp.NewExportResponse(), status.Error(codes.InvalidArgument, "invalid labels '{=\"706\"}' with error: invalid label name ''")
}

// TestAgentLogsRefusals: a backend that refuses every request, over HTTP
// (with a plain-text body, as Pyroscope answers) and over gRPC, has its
// message in the agent's log once an interval, and the interval's line
// counts the refusals.
func TestAgentLogsRefusals(t *testing.T) {
	const message = "invalid labels '{=\"706\"}' with error: invalid label name ''"
	r := testruby.Get(t, testRuby)
	testruby.Start(t, r, script("shares.rb"))
	for _, protocol := range []string{ProtocolHTTP, ProtocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			var addr string
			if protocol == ProtocolHTTP {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
					w.Header().Set("Content-Type", "text/plain; charset=utf-8")
					w.WriteHeader(http.StatusBadRequest)
					w.Write([]byte(message + "\n"))
				}))
				t.Cleanup(srv.Close)
				addr = strings.TrimPrefix(srv.URL, "http://")
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				s := grpc.NewServer()
				pprofileotlp.RegisterGRPCServer(s, &refusingGRPC{})
				go s.Serve(ln)
				t.Cleanup(s.Stop)
				addr = ln.Addr().String()
			}
			// Two requests an interval: one interval's samples split by size.
			stop, log := startAgent(t, Options{Endpoint: Endpoint{Address: addr, Protocol: protocol, Insecure: true},
				Interval: time.Second, FlushTimeout: time.Second})
			time.Sleep(3500 * time.Millisecond)
			st := stop()
			text := log.String()
			t.Logf("stats %+v\n%s", *st, text)
			if st.Rejected == 0 || st.Sent != 0 {
				t.Fatalf("%d requests refused, %d sent; want all refused", st.Rejected, st.Sent)
			}
			logged := strings.Count(text, message)
			intervals := len(regexp.MustCompile(`(?m)^rubyperf agent: \S+ \+`).FindAllString(text, -1))
			if logged == 0 || logged > intervals+1 {
				t.Errorf("the backend's message logged %d times over %d intervals, want once an interval at most", logged, intervals)
			}
			if !regexp.MustCompile(`refused [1-9]\d* so far`).MatchString(text) {
				t.Errorf("no interval's line counts the refusals")
			}
		})
	}
}

// TestRefusedOnceAnInterval: a refusal is logged the first time its
// message comes in an interval (a partial success's count aside), and past
// maxRefusalKinds messages none is.
func TestRefusedOnceAnInterval(t *testing.T) {
	a := &agent{}
	http400 := errors.New("http://127.0.0.1:1/v1development/profiles: 400 Bad Request: bad label")
	for i, c := range []struct {
		err  error
		want bool
	}{
		{http400, true}, {http400, false},
		{rejectedError{3, "too old"}, true}, {rejectedError{5, "too old"}, false}, {rejectedError{5, "too new"}, true},
	} {
		if got := a.refused(c.err); got != c.want {
			t.Errorf("refusal %d (%v): logged %v, want %v", i, c.err, got, c.want)
		}
	}
	clear(a.refusals) // the next interval
	if !a.refused(http400) {
		t.Errorf("the next interval's first refusal is not logged")
	}
	for i := range maxRefusalKinds {
		a.refused(fmt.Errorf("message %d", i))
	}
	if a.refused(errors.New("one more")) {
		t.Errorf("a message past %d kinds an interval is logged", maxRefusalKinds)
	}
}

// FuzzResponseMessage: whatever a backend answers, its message is one
// line of printable text within the bound, and nothing panics.
func FuzzResponseMessage(f *testing.F) {
	st, _ := proto.Marshal(&spb.Status{Code: 3, Message: "bad"})
	f.Add("application/x-protobuf", st)
	f.Add("application/json", []byte(`{"message":"bad\nlabel"}`))
	f.Add("text/plain", []byte("invalid label name ''\n"))
	f.Add("text/plain", []byte(strings.Repeat("a", maxRefusalBytes)+" b")) // a space at the bound
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		m := responseMessage(contentType, body)
		if len(m) > maxRefusalBytes+len("…") || strings.ContainsAny(m, "\n\r\x00") {
			t.Fatalf("message %q (%d bytes)", m, len(m))
		}
	})
}
