package main

import (
	"os"
	"testing"

	"github.com/rubyperf/rubyperf/perfdata"
)

// recordingRewrite says how rewriteRecording changes a recording.
type recordingRewrite struct {
	// record gives the bytes written for r's current record (nil: its
	// own, r.Raw()).
	record func(r *perfdata.Reader) []byte
	// feats are feature sections that replace the recording's own.
	feats map[perfdata.Feature][]byte
	// unfinished writes no feature section at all, as a recorder killed
	// after a checkpoint leaves it.
	unfinished bool
}

// rewriteRecording copies the recording src to dst, changed as how says:
// what an attacker who hands root a recording can write.
func rewriteRecording(t *testing.T, src, dst string, how recordingRewrite) {
	t.Helper()
	r, err := perfdata.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := perfdata.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range r.Events() {
		if err := w.AddEvent(e.Attr, e.Name, e.IDs); err != nil {
			t.Fatal(err)
		}
	}
	for r.Next() {
		raw := r.Raw()
		if how.record != nil {
			raw = how.record(r)
		}
		if err := w.WriteRecord(raw); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if how.unfinished {
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, feat := range r.Features() {
		if b, ok := r.Feature(feat); ok && feat != perfdata.FeatEventDesc && how.feats[feat] == nil {
			if err := w.SetFeature(feat, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	for feat, b := range how.feats {
		if err := w.SetFeature(feat, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
