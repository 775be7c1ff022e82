package agent

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the collector takes gzip
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Protocols the agent sends OTLP by.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http"
)

// profilesPath is where an OTLP/HTTP receiver takes profiles (the
// collector's otlpreceiver, while the signal is in development).
const profilesPath = "/v1development/profiles"

// Endpoint is where and how profiles are sent.
type Endpoint struct {
	Address  string // host:port
	Protocol string // ProtocolGRPC (default) or ProtocolHTTP
	Insecure bool   // plain text, no TLS
	// TLS: a CA bundle to trust instead of the system's, and a client
	// certificate for mutual TLS.
	CAFile, CertFile, KeyFile string
	// Headers go with every request (API keys: "Authorization").
	Headers map[string]string
	Timeout time.Duration // per request; default 10 s
	// MaxRetryDelay bounds the wait between two tries while the collector
	// cannot be reached (the agent's and, over gRPC, the connection's own).
	MaxRetryDelay time.Duration
}

// exporter sends encoded OTLP profiles export requests.
type exporter interface {
	// Export sends one request; a permanent error (errPermanent) says
	// sending it again cannot help.
	Export(ctx context.Context, req Request) (rejected int64, err error)
	Close() error
}

// permanentError is a refusal that retrying the same request cannot change.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

func newExporter(e Endpoint) (exporter, error) {
	var tlsConf *tls.Config
	if !e.Insecure {
		c, err := e.tlsConfig()
		if err != nil {
			return nil, err
		}
		tlsConf = c
	}
	if e.Timeout <= 0 {
		e.Timeout = 10 * time.Second
	}
	if e.MaxRetryDelay <= 0 {
		e.MaxRetryDelay = 30 * time.Second
	}
	switch e.Protocol {
	case "", ProtocolGRPC:
		creds := insecure.NewCredentials()
		if tlsConf != nil {
			creds = credentials.NewTLS(tlsConf)
		}
		// gRPC waits longer and longer to connect again (up to two minutes
		// by default): a collector back from an outage would get nothing
		// for that long, while the queue drops intervals.
		conn, err := grpc.NewClient(e.Address, grpc.WithTransportCredentials(creds),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: time.Second, Multiplier: 1.6,
				Jitter: 0.2, MaxDelay: e.MaxRetryDelay}, MinConnectTimeout: 5 * time.Second}))
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", e.Address, err)
		}
		return &grpcExporter{conn: conn, e: e}, nil
	case ProtocolHTTP:
		scheme := "https"
		if e.Insecure {
			scheme = "http"
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tlsConf
		return &httpExporter{url: scheme + "://" + e.Address + profilesPath, client: &http.Client{Transport: tr, Timeout: e.Timeout}, e: e}, nil
	case ProtocolPyroscope:
		base, err := pyroscopeBase(e.Address)
		if err != nil {
			return nil, err
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tlsConf
		return &pyroscopeExporter{base: base, client: &http.Client{Transport: tr, Timeout: e.Timeout}, e: e}, nil
	}
	return nil, fmt.Errorf("protocol %q: grpc, http or pyroscope", e.Protocol)
}

func (e Endpoint) tlsConfig() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if e.CAFile != "" {
		pem, err := os.ReadFile(e.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", e.CAFile)
		}
	}
	if e.CertFile != "" || e.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(e.CertFile, e.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

type grpcExporter struct {
	conn *grpc.ClientConn
	e    Endpoint
}

// exportMethod is ProfilesService's Export, as OTLP's protos name it.
const exportMethod = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

// encoded is a protobuf message already encoded, sent and received as it
// is (rawCodec).
type encoded struct{ b []byte }

// rawCodec has gRPC send the agent's requests as it encoded them: pdata's
// own client would decode and encode them again, putting attribute keys
// back into the string table (inlineAttributes says why they are not).
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*encoded)
	if !ok {
		return nil, fmt.Errorf("raw codec: %T is not encoded", v)
	}
	return m.b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*encoded)
	if !ok {
		return fmt.Errorf("raw codec: %T is not encoded", v)
	}
	m.b = append(m.b[:0], data...)
	return nil
}

func (g *grpcExporter) Export(ctx context.Context, r Request) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, g.e.Timeout)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, pprofileotlp.DevelopmentVersionHeader, pprofileotlp.DevelopmentVersion)
	for k, v := range g.e.Headers {
		ctx = metadata.AppendToOutgoingContext(ctx, strings.ToLower(k), v)
	}
	var out encoded
	err := g.conn.Invoke(ctx, exportMethod, &encoded{r.Body}, &out, grpc.UseCompressor("gzip"), grpc.ForceCodec(rawCodec{}))
	if err != nil {
		if status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "larger than max") {
			return 0, permanentError{err} // the same request would be refused again
		}
		switch status.Code(err) {
		case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Aborted, codes.Canceled,
			codes.OutOfRange, codes.DataLoss:
			return 0, err
		}
		// The backend's message, bounded, on one line.
		return 0, permanentError{fmt.Errorf("%s: %s", status.Code(err), oneLine(status.Convert(err).Message()))}
	}
	resp := pprofileotlp.NewExportResponse()
	if err := resp.UnmarshalProto(out.b); err != nil {
		return 0, nil // accepted; what it said of it is not readable
	}
	ps := resp.PartialSuccess()
	if n := ps.RejectedProfiles(); n > 0 {
		return n, rejectedError{n, oneLine(ps.ErrorMessage())}
	}
	return 0, nil
}

func (g *grpcExporter) Close() error { return g.conn.Close() }

type httpExporter struct {
	url    string
	client *http.Client
	e      Endpoint
}

// maxResponseBytes bounds a collector's response as read.
const maxResponseBytes = 1 << 20

func (h *httpExporter) Export(ctx context.Context, r Request) (int64, error) {
	var body bytes.Buffer
	zw := gzip.NewWriter(&body)
	zw.Write(r.Body)
	zw.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, &body)
	if err != nil {
		return 0, permanentError{err}
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set(pprofileotlp.DevelopmentVersionHeader, pprofileotlp.DevelopmentVersion)
	for k, v := range h.e.Headers {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	switch {
	case resp.StatusCode == http.StatusOK:
		r := pprofileotlp.NewExportResponse()
		if r.UnmarshalProto(rb) == nil {
			if n := r.PartialSuccess().RejectedProfiles(); n > 0 {
				return n, rejectedError{n, oneLine(r.PartialSuccess().ErrorMessage())}
			}
		}
		return 0, nil
	}
	return 0, httpRefusal(h.url, resp, rb)
}

// httpRefusal is the error of an HTTP refusal from where: its status, and
// the backend's message where its body has one; permanent unless the
// backend says it is busy or down for now.
func httpRefusal(where string, resp *http.Response, body []byte) error {
	refusal := fmt.Errorf("%s: %s", where, resp.Status)
	if msg := responseMessage(resp.Header.Get("Content-Type"), body); msg != "" {
		refusal = fmt.Errorf("%s: %s: %s", where, resp.Status, msg)
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return refusal
	}
	return permanentError{refusal}
}

func (h *httpExporter) Close() error {
	h.client.CloseIdleConnections()
	return nil
}
