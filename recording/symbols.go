package recording

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/rubystack"
)

// FeatureRubySymbols is the private perf.data feature bit holding the Ruby
// symbol table. perf 6.1 skips feature bits it does not know.
const FeatureRubySymbols = 200

// FeatureKallsyms holds /proc/kallsyms as it was while recording, gzipped,
// so kernel frames can be named on another machine.
const FeatureKallsyms = 201

// symbolTableVersion is the format of the Ruby symbol table section.
const symbolTableVersion = 1

// maxSymbolTableBytes bounds the decompressed symbol table read from a file.
const maxSymbolTableBytes = 256 << 20

// Image is a process image: a pid from one exec to the next. Gen counts
// the times the recording attached to the pid (bpf.Payload.Gen).
type Image struct{ PID, Gen uint32 }

// FrameKey identifies a captured control frame in one process image: the
// pointers the BPF walker copied.
type FrameKey struct {
	PID    uint32
	Gen    uint32
	Iseq   uint64
	PC     uint64
	CME    uint64
	CFrame bool
}

// FrameInfo is what a frame key means: a symbolized frame, or that the frame
// is not one rb_profile_frames reports (Drop).
type FrameInfo struct {
	Label   string
	Path    string
	HasPath bool
	Line    int64
	CFunc   bool
	Unknown bool
	Drop    bool
}

// SymbolTable maps frame keys to their meaning, per process, and says
// where each process's VM entry function is.
type SymbolTable struct {
	Frames map[FrameKey]FrameInfo
	VMExec map[Image]VMExec
}

// VMExec is where rb_vm_exec lies in a process's Ruby binary (stripped
// builds have no symbol for it): a native frame there is one VM entry.
type VMExec struct {
	Path       string // the binary as the process maps it
	Start, End uint64 // virtual addresses in the file
}

// NewSymbolTable returns an empty table.
func NewSymbolTable() *SymbolTable {
	return &SymbolTable{Frames: map[FrameKey]FrameInfo{}, VMExec: map[Image]VMExec{}}
}

// Key is the key of a frame of a payload of process image (pid, gen).
func Key(pid, gen uint32, f bpf.Frame) FrameKey {
	return FrameKey{PID: pid, Gen: gen, Iseq: f.Iseq, PC: f.PC, CME: f.CME, CFrame: f.CFrame}
}

// Resolve symbolizes the payload's frames that the table does not know yet,
// through r, which reads the process's live memory. It returns those frames
// (now in the table, named, dropped or unknown) and how many are unknown.
func (t *SymbolTable) Resolve(r *rubystack.Reader, p *bpf.Payload) (added []bpf.Frame, unknown int) {
	for _, f := range p.Frames {
		k := Key(p.PID, p.Gen, f)
		if _, ok := t.Frames[k]; ok {
			continue
		}
		one := bpf.Payload{PID: p.PID, Frames: []bpf.Frame{f}}
		raw := one.RawFrames(r)
		if len(raw) == 0 {
			t.Frames[k] = FrameInfo{Drop: true}
		} else {
			fr := r.Symbolize(raw[0])
			t.Frames[k] = FrameInfo{Label: fr.Label, Path: fr.Path, HasPath: fr.HasPath, Line: fr.Line,
				CFunc: fr.CFunc, Unknown: fr.Unknown}
			if fr.Unknown {
				unknown++
			}
		}
		added = append(added, f)
	}
	return added, unknown
}

// Forget drops what Resolve added for frames of process image (pid, gen).
func (t *SymbolTable) Forget(pid, gen uint32, frames []bpf.Frame) {
	for _, f := range frames {
		delete(t.Frames, Key(pid, gen, f))
	}
}

// Stack returns the Ruby frames of a payload, leaf first, as the table names
// them; frames it does not know come out unknown.
func (t *SymbolTable) Stack(p *bpf.Payload) []FrameInfo {
	out := make([]FrameInfo, 0, len(p.Frames))
	for _, f := range p.Frames {
		info, ok := t.Frames[Key(p.PID, p.Gen, f)]
		switch {
		case !ok || f.Error:
			out = append(out, FrameInfo{Label: rubystack.UnknownLabel, Unknown: true})
		case !info.Drop:
			out = append(out, info)
		}
	}
	return out
}

// symbolTableJSON is the section's content, gzipped.
type symbolTableJSON struct {
	Version int          `json:"version"`
	Frames  []frameJSON  `json:"frames"`
	VMExec  []vmExecJSON `json:"vm_exec,omitempty"`
}

type vmExecJSON struct {
	PID   uint32 `json:"pid"`
	Gen   uint32 `json:"gen,omitempty"`
	Path  string `json:"path"`
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
}

type frameJSON struct {
	PID     uint32 `json:"pid"`
	Gen     uint32 `json:"gen,omitempty"`
	Iseq    uint64 `json:"iseq,omitempty"`
	PC      uint64 `json:"pc,omitempty"`
	CME     uint64 `json:"cme,omitempty"`
	CFrame  bool   `json:"cframe,omitempty"`
	Label   string `json:"label,omitempty"`
	Path    string `json:"path,omitempty"`
	HasPath bool   `json:"has_path,omitempty"`
	Line    int64  `json:"line,omitempty"`
	CFunc   bool   `json:"cfunc,omitempty"`
	Unknown bool   `json:"unknown,omitempty"`
	Drop    bool   `json:"drop,omitempty"`
}

// Encode writes the table as the FeatureRubySymbols section.
func (t *SymbolTable) Encode() ([]byte, error) {
	doc := symbolTableJSON{Version: symbolTableVersion, Frames: make([]frameJSON, 0, len(t.Frames))}
	for k, v := range t.Frames {
		doc.Frames = append(doc.Frames, frameJSON{PID: k.PID, Gen: k.Gen, Iseq: k.Iseq, PC: k.PC, CME: k.CME, CFrame: k.CFrame,
			Label: v.Label, Path: v.Path, HasPath: v.HasPath, Line: v.Line, CFunc: v.CFunc, Unknown: v.Unknown, Drop: v.Drop})
	}
	sort.Slice(doc.Frames, func(i, j int) bool {
		a, b := doc.Frames[i], doc.Frames[j]
		if a.PID != b.PID {
			return a.PID < b.PID
		}
		if a.Gen != b.Gen {
			return a.Gen < b.Gen
		}
		if a.CME != b.CME {
			return a.CME < b.CME
		}
		if a.Iseq != b.Iseq {
			return a.Iseq < b.Iseq
		}
		return a.PC < b.PC
	})
	for im, v := range t.VMExec {
		doc.VMExec = append(doc.VMExec, vmExecJSON{PID: im.PID, Gen: im.Gen, Path: v.Path, Start: v.Start, End: v.End})
	}
	sort.Slice(doc.VMExec, func(i, j int) bool {
		a, b := doc.VMExec[i], doc.VMExec[j]
		return a.PID < b.PID || a.PID == b.PID && a.Gen < b.Gen
	})
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(doc); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeSymbolTable reads a FeatureRubySymbols section.
func DecodeSymbolTable(b []byte) (*SymbolTable, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("ruby symbol table: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, maxSymbolTableBytes+1))
	if err != nil {
		return nil, fmt.Errorf("ruby symbol table: %w", err)
	}
	if len(data) > maxSymbolTableBytes {
		return nil, fmt.Errorf("ruby symbol table: over %d bytes", maxSymbolTableBytes)
	}
	var doc symbolTableJSON
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("ruby symbol table: %w", err)
	}
	if doc.Version != symbolTableVersion {
		return nil, fmt.Errorf("ruby symbol table: version %d, this rubyperf reads %d", doc.Version, symbolTableVersion)
	}
	t := NewSymbolTable()
	for _, v := range doc.VMExec {
		t.VMExec[Image{v.PID, v.Gen}] = VMExec{Path: v.Path, Start: v.Start, End: v.End}
	}
	for _, f := range doc.Frames {
		t.Frames[FrameKey{PID: f.PID, Gen: f.Gen, Iseq: f.Iseq, PC: f.PC, CME: f.CME, CFrame: f.CFrame}] = FrameInfo{
			Label: f.Label, Path: f.Path, HasPath: f.HasPath, Line: f.Line, CFunc: f.CFunc, Unknown: f.Unknown, Drop: f.Drop}
	}
	return t, nil
}
