package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

// maxRefusalBytes bounds a backend's message as the agent logs it.
const maxRefusalBytes = 512

// responseMessage is the message a backend gave with a refusal over HTTP,
// from its body as read (bounded), on one line and bounded: OTLP/HTTP's
// google.rpc.Status, in protobuf or JSON, or what else the body says
// (Pyroscope answers in plain text). "" if it gave none.
func responseMessage(contentType string, body []byte) string {
	ct, _, _ := strings.Cut(strings.ToLower(contentType), ";")
	ct = strings.TrimSpace(ct)
	switch {
	case ct == "application/x-protobuf" || ct == "application/protobuf":
		var st spb.Status
		if proto.Unmarshal(body, &st) == nil && st.GetMessage() != "" {
			return oneLine(st.GetMessage())
		}
	case ct == "application/json":
		var st struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &st) == nil && st.Message != "" {
			return oneLine(st.Message)
		}
	}
	return oneLine(string(body))
}

// oneLine is s on one line of printable text, at most maxRefusalBytes (cut
// on a rune, marked with "…").
func oneLine(s string) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			space = b.Len() > 0
			continue
		}
		n := utf8.RuneLen(r)
		if space {
			n++
		}
		if n < 0 || b.Len()+n > maxRefusalBytes {
			b.WriteString("…")
			break
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// rejectedError is a collector's partial success: it took the request but
// refused n of its profiles, saying why (msg).
type rejectedError struct {
	n   int64
	msg string
}

func (e rejectedError) Error() string {
	return fmt.Sprintf("collector rejected %d %s: %s", e.n, plural(int(e.n), "profile", "profiles"), e.msg)
}

// refusalKey is what makes two refusals the same for the log: their
// message, not the counts in it.
func refusalKey(err error) string {
	if r, ok := errors.AsType[rejectedError](err); ok {
		return "rejected: " + r.msg
	}
	return err.Error()
}
