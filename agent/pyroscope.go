package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/rubyperf/rubyperf/export"
	"github.com/rubyperf/rubyperf/merge"
)

// Grafana Pyroscope's own ingest API takes a pprof profile per request:
// POST /ingest?name=SERVICE{LABEL=VALUE,...}&from=UNIX&until=UNIX&format=pprof,
// the gzipped profile as the body. The labels in the name make the
// profile's series; the pprof's sample labels (thread, thread_state, the
// request labels) are kept beside them. For teams without a Collector.

// ProtocolPyroscope sends pprof to Pyroscope's ingest API (Endpoint.Address
// is then a URL).
const ProtocolPyroscope = "pyroscope"

// ingestPath is Pyroscope's ingest API.
const ingestPath = "/ingest"

// pyroscopeRequests encodes the interval as one request per process and
// kind of sample (CPU, allocations): a pprof profile, and the query that
// names its series.
func (iv *Interval) pyroscopeRequests(res Resource) ([]Request, error) {
	var out []Request
	for _, pid := range iv.pids() {
		ps := iv.Procs[pid]
		for _, alloc := range []bool{false, true} {
			p := export.NewPprof(export.PprofOptions{Period: res.Period, TimeNanos: iv.Start.UnixNano(),
				DurationNanos: max(iv.End.Sub(iv.Start).Nanoseconds(), 0), NoIDs: true})
			var n uint64
			for _, key := range sortedKeys(ps.Samples) {
				s := ps.Samples[key]
				if s.Alloc != alloc || s.InUse {
					continue // in-use profiles go by OTLP only
				}
				st := merge.Stack{PID: pid, Comm: s.Thread, State: s.State, Labels: s.Labels, Period: uint64(max(res.Period, 0)),
					Frames: make([]merge.Frame, len(s.Frames))}
				for i, id := range s.Frames {
					st.Frames[i] = iv.Frames[id].merged()
				}
				count := s.Count
				if alloc {
					st.Alloc, st.Period, st.AllocBytes, count = true, uint64(s.Objects), uint64(s.Bytes), 1
				}
				p.AddN(&st, count)
				n += uint64(s.Count)
			}
			if n == 0 {
				continue
			}
			var body bytes.Buffer
			if err := p.Write(&body); err != nil {
				return out, fmt.Errorf("pid %d: %w", pid, err)
			}
			q := url.Values{}
			q.Set("name", seriesName(ps, res))
			q.Set("from", strconv.FormatInt(iv.Start.Unix(), 10))
			q.Set("until", strconv.FormatInt(max(iv.End.Unix(), iv.Start.Unix()+1), 10))
			q.Set("format", "pprof")
			q.Set("spyName", "rubyperf")
			if res.Period > 0 && !alloc {
				q.Set("sampleRate", strconv.FormatInt(1e9/res.Period, 10))
			}
			out = append(out, Request{Body: body.Bytes(), Samples: n, Query: q.Encode()})
		}
	}
	return out, nil
}

func sortedKeys(m map[string]*Sample) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// seriesName is a process's series as Pyroscope's ingest takes it:
// SERVICE{LABEL=VALUE,...}, the labels being the resource attributes the
// OTLP profiles carry, their names' dots made underscores (as Pyroscope's
// own OTLP ingest does).
func seriesName(ps *ProcessSamples, res Resource) string {
	service := "ruby"
	labels := map[string]string{labelName(processPIDAttr): strconv.Itoa(ps.Process.PID)}
	for _, kv := range resourceAttributes(ps, res) {
		if kv[0] == serviceNameAttr {
			service = kv[1]
		} else if k := labelName(kv[0]); labels[k] == "" {
			labels[k] = kv[1]
		}
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(labelValue(service))
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labelValue(labels[k]))
	}
	b.WriteByte('}')
	return b.String()
}

// labelName is k as a label name Pyroscope takes (letters, digits and
// underscores, not first a digit): other characters become underscores.
func labelName(k string) string {
	b := []byte(k)
	for i, c := range b {
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' && i > 0) {
			b[i] = '_'
		}
	}
	return string(b)
}

// labelValue is v without the characters that delimit the series name's
// parts (braces, commas, equals signs), as one printable line.
func labelValue(v string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '{', '}', ',', '=':
			return '_'
		}
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, v)
}

// Name is where the endpoint is, as logs say it: a URL without its
// password.
func (e Endpoint) Name() string {
	if e.Protocol == ProtocolPyroscope {
		if u, err := url.Parse(e.Address); err == nil {
			return u.Redacted()
		}
	}
	return e.Address
}

// pyroscopeBase is Pyroscope's URL u checked: http or https, a host, no
// query; without its trailing slash.
func pyroscopeBase(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.RawQuery != "" || p.Fragment != "" {
		return "", fmt.Errorf("pyroscope URL %q: want http://HOST:PORT or https://HOST[:PORT][/PATH]", u)
	}
	return strings.TrimSuffix(p.String(), "/"), nil
}

type pyroscopeExporter struct {
	base   string // scheme://[user:password@]host[:port][/prefix], no trailing slash
	client *http.Client
	e      Endpoint
}

func (p *pyroscopeExporter) Export(ctx context.Context, r Request) (int64, error) {
	u := p.base + ingestPath + "?" + r.Query
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(r.Body))
	if err != nil {
		return 0, permanentError{err}
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	for k, v := range p.e.Headers {
		req.Header.Set(k, v)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if resp.StatusCode/100 == 2 {
		return 0, nil
	}
	return 0, httpRefusal(strings.TrimSuffix(p.e.Name(), "/")+ingestPath, resp, rb)
}

func (p *pyroscopeExporter) Close() error {
	p.client.CloseIdleConnections()
	return nil
}
