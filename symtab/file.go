package symtab

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/rubyperf/rubyperf/internal/bounded"
	"github.com/rubyperf/rubyperf/payload"
)

// The symbol table's on-disk format (a private feature section of the
// recording's perf.data): gzipped JSON, written one entry at a time and
// read back within bounds.

// symbolTableVersion is the format of the Ruby symbol table section.
// Version 3 lists names, which samples refer to by id (payload.Named);
// version 1 (a name per frame key, for every sample) is read too. (Version 2
// was never released.)
const symbolTableVersion = 3

// symbolTableJSON is the section's content, gzipped.
type symbolTableJSON struct {
	Version int          `json:"version"`
	Frames  []frameJSON  `json:"frames,omitempty"`
	Names   []nameJSON   `json:"names,omitempty"`
	VMExec  []vmExecJSON `json:"vm_exec,omitempty"`
}

// nameJSON is one name named samples refer to, by its place in the list.
type nameJSON struct {
	Label   string `json:"label,omitempty"`
	Path    string `json:"path,omitempty"`
	HasPath bool   `json:"has_path,omitempty"`
	Line    int64  `json:"line,omitempty"`
	CFunc   bool   `json:"cfunc,omitempty"`
	Unknown bool   `json:"unknown,omitempty"`
	Drop    bool   `json:"drop,omitempty"`
}

type vmExecJSON struct {
	PID   uint32 `json:"pid"`
	Gen   uint32 `json:"gen,omitempty"`
	Path  string `json:"path"`
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
}

// nameOf is the name entry of v.
func nameOf(v FrameInfo) nameJSON {
	return nameJSON{Label: v.Label, Path: v.Path, HasPath: v.HasPath, Line: v.Line, CFunc: v.CFunc, Unknown: v.Unknown, Drop: v.Drop}
}

// info is the name n holds.
func (n nameJSON) info() FrameInfo {
	return FrameInfo{Label: n.Label, Path: n.Path, HasPath: n.HasPath, Line: n.Line, CFunc: n.CFunc, Unknown: n.Unknown, Drop: n.Drop}
}

// frameJSON is a frame key and its name (version 1): the name's fields
// follow the key's in the same object.
type frameJSON struct {
	PID      uint32 `json:"pid"`
	Gen      uint32 `json:"gen,omitempty"`
	Iseq     uint64 `json:"iseq,omitempty"`
	PC       uint64 `json:"pc,omitempty"`
	CME      uint64 `json:"cme,omitempty"`
	CFrame   bool   `json:"cframe,omitempty"`
	nameJSON        // its fields, as if they were frameJSON's
}

// Encode is the table as the Ruby symbol table section (see Write).
func (t *Table) Encode() ([]byte, error) {
	var buf bytes.Buffer
	if err := t.Write(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Write writes the table as the Ruby symbol table section to w: the names
// named samples refer to, and where each process's VM entry function is.
// Frame keys and their spans stay behind: each sample carries its names.
// It writes the JSON of symbolTableJSON a name at a time, so it holds no
// copy of the table (the table may be most of a recording's memory).
func (t *Table) Write(w io.Writer) error {
	var frames []frameJSON
	if t.decodedFrames {
		// A table read from a version 1 recording: its samples name their
		// frames by key, each key one name for every sample.
		for k, names := range t.Frames {
			frames = append(frames, frameJSON{PID: k.PID, Gen: k.Gen, Iseq: k.Iseq, PC: k.PC, CME: k.CME, CFrame: k.CFrame,
				nameJSON: nameOf(names[0].FrameInfo)})
		}
		sort.Slice(frames, func(i, j int) bool { return frameLess(frames[i], frames[j]) })
	}
	vmExec := make([]vmExecJSON, 0, len(t.VMExec))
	for im, v := range t.VMExec {
		vmExec = append(vmExec, vmExecJSON{PID: im.PID, Gen: im.Gen, Path: v.Path, Start: v.Start, End: v.End})
	}
	sort.Slice(vmExec, func(i, j int) bool {
		a, b := vmExec[i], vmExec[j]
		return a.PID < b.PID || a.PID == b.PID && a.Gen < b.Gen
	})
	zw := gzip.NewWriter(w)
	bw := bufio.NewWriterSize(zw, 64<<10)
	fmt.Fprintf(bw, `{"version":%d`, symbolTableVersion)
	writeList(bw, "frames", len(frames), func(i int) any { return frames[i] })
	writeList(bw, "names", len(t.Names), func(i int) any { return nameOf(t.Names[i]) })
	writeList(bw, "vm_exec", len(vmExec), func(i int) any { return vmExec[i] })
	bw.WriteString("}\n")
	if err := bw.Flush(); err != nil {
		return err
	}
	return zw.Close()
}

// writeList writes `,"key":[...]` of n elements (nothing for none, as
// omitempty does), each as encoding/json writes it; errors stay in w.
func writeList(w *bufio.Writer, key string, n int, elem func(int) any) {
	if n == 0 {
		return
	}
	fmt.Fprintf(w, `,%q:[`, key)
	for i := range n {
		if i > 0 {
			w.WriteByte(',')
		}
		b, err := json.Marshal(elem(i))
		if err != nil {
			b = []byte("{}") // the types have no field Marshal refuses
		}
		w.Write(b)
	}
	w.WriteByte(']')
}

// Bounds on a symbol table read from a file, besides MaxBytes
// and maxNames. A real entry is a label and a path, each at most a few of
// rubystack's 4 KiB strings, and JSON writes a byte as at most 6.
const (
	maxEntryBytes  = 256 << 10 // one entry's JSON text
	maxFieldBytes  = 64 << 10  // one label or path, decoded
	maxEntries     = maxNames  // of each list (names, frames, vm_exec)
	maxUnknownKeys = 64        // top-level keys this version does not know
)

// Decode reads a Ruby symbol table section. It reads the JSON
// one entry at a time and refuses the table at the first entry no recorder
// writes (a frame of no process, a name twice, an entry or a string over
// its bound), so what it holds is never more than the entries it keeps.
func Decode(b []byte) (*Table, error) {
	t, err := decode(b)
	if err != nil {
		return nil, fmt.Errorf("ruby symbol table: %w", err)
	}
	return t, nil
}

func decode(b []byte) (*Table, error) {
	text, err := bounded.Gunzip(b, MaxBytes)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(text)
	text.HoldAtMost(dec.InputOffset, maxEntryBytes)
	if err := delim(dec, '{'); err != nil {
		return nil, err
	}
	t := New()
	version, unknown := 0, 0
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		if seen[key] {
			return nil, fmt.Errorf("%q twice", key)
		}
		seen[key] = true
		switch key {
		case "version":
			if err := dec.Decode(&version); err != nil {
				return nil, fmt.Errorf("version: %w", err)
			}
		case "names":
			var n nameJSON
			err = entries(dec, key, &n, func() error {
				info := n.info()
				if _, dup := t.nameIDs[info]; dup {
					return errors.New("a name given twice (a recorder gives each once)")
				}
				if err := fieldsBounded(n.Label, n.Path); err != nil {
					return err
				}
				t.Names = append(t.Names, info)
				t.nameIDs[info] = uint64(NameFirst + len(t.Names) - 1)
				return nil
			})
		case "frames":
			var f frameJSON
			err = entries(dec, key, &f, func() error {
				if f.PID == 0 {
					return errors.New("no pid (every frame is of a process)")
				}
				if err := fieldsBounded(f.Label, f.Path); err != nil {
					return err
				}
				k := FrameKey{PID: f.PID, Gen: f.Gen, Iseq: f.Iseq, PC: f.PC, CME: f.CME, CFrame: f.CFrame}
				if k.CFrame {
					k.Iseq = 0 // as Key makes it (version 1 kept a C frame's iseq slot)
				}
				if len(t.Frames[k]) > 0 {
					return nil // version 1 named every call's IFUNC apart: the first name serves
				}
				t.decodedFrames = true
				t.Frames[k] = []Named{{Span: payload.FullSpan, FrameInfo: f.info()}}
				return nil
			})
		case "vm_exec":
			var v vmExecJSON
			err = entries(dec, key, &v, func() error {
				if v.PID == 0 || v.Start >= v.End {
					return fmt.Errorf("pid %d, %#x-%#x: not a function of a process", v.PID, v.Start, v.End)
				}
				if err := fieldsBounded(v.Path); err != nil {
					return err
				}
				t.VMExec[Image{v.PID, v.Gen}] = VMExec{Path: v.Path, Start: v.Start, End: v.End}
				return nil
			})
		default:
			if unknown++; unknown > maxUnknownKeys {
				return nil, fmt.Errorf("over %d keys this rubyperf does not know", maxUnknownKeys)
			}
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := delim(dec, '}'); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("more after the table")
		}
		return nil, err
	}
	if version < 1 || version > symbolTableVersion {
		return nil, fmt.Errorf("version %d, this rubyperf reads 1 to %d", version, symbolTableVersion)
	}
	return t, nil
}

// delim reads the delimiter want.
func delim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("%v where %v belongs", tok, want)
	}
	return nil
}

// entries reads the JSON list of section key one entry at a time into
// *entry, calling take after each: at most maxEntries of them.
func entries[T any](dec *json.Decoder, key string, entry *T, take func() error) error {
	if err := delim(dec, '['); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	for i := 1; dec.More(); i++ {
		if i > maxEntries {
			return fmt.Errorf("%s: over %d entries", key, maxEntries)
		}
		var zero T
		*entry = zero
		if err := dec.Decode(entry); err != nil {
			return fmt.Errorf("%s entry %d: %w", key, i, err)
		}
		if err := take(); err != nil {
			return fmt.Errorf("%s entry %d: %w", key, i, err)
		}
	}
	if err := delim(dec, ']'); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// fieldsBounded refuses a string over maxFieldBytes.
func fieldsBounded(fields ...string) error {
	for _, s := range fields {
		if len(s) > maxFieldBytes {
			return fmt.Errorf("a string of %d bytes, over %d", len(s), maxFieldBytes)
		}
	}
	return nil
}

// frameLess orders frame entries by key.
func frameLess(a, b frameJSON) bool {
	switch {
	case a.PID != b.PID:
		return a.PID < b.PID
	case a.Gen != b.Gen:
		return a.Gen < b.Gen
	case a.CME != b.CME:
		return a.CME < b.CME
	case a.Iseq != b.Iseq:
		return a.Iseq < b.Iseq
	case a.PC != b.PC:
		return a.PC < b.PC
	}
	return !a.CFrame && b.CFrame
}
