package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/rubyperf/rubyperf/export"
	"github.com/rubyperf/rubyperf/rubybuild"
	"github.com/rubyperf/rubyperf/rubystack"
)

func runOffsets(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("offsets", flag.ContinueOnError)
	target := addRubyTargetFlags(fs, "text", "json", "go")
	pid, format, debugFile := target.pid, target.format, target.debugFile
	source := fs.String("source", "", "with --format go: what the tables were generated from (default: the DWARF files)")
	configure := fs.String("configure", "", "with --format go: the configure flags the layouts assume, recorded in the table")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := target.checkFormat(); err != nil {
		return err
	}
	switch {
	case *pid != 0 && len(pos) > 0:
		return usageError{"give a BINARY or -p PID, not both"}
	case *format == "go" && *pid == 0 && len(pos) == 0:
		return usageError{"give one or more BINARY (or layout probe OBJECT) files, or -p PID"}
	case *format != "go" && *pid == 0 && len(pos) != 1:
		return usageError{"give one BINARY or -p PID"}
	case *format != "go" && (*source != "" || *configure != ""):
		return usageError{"--source and --configure go with --format go"}
	case len(pos) > 1 && *debugFile != "":
		return usageError{"--debug-file goes with one BINARY"}
	}
	opts := rubybuild.OpenOptions{DebugFile: *debugFile, Debuginfo: newFinder(stderr, nil)}
	if *format == "go" && *pid == 0 {
		return writeGoTables(pos, opts, *source, *configure, stdout, stderr)
	}

	var (
		bin  *rubybuild.Binary
		proc *rubystack.Process
	)
	if *pid != 0 {
		proc, err = rubystack.OpenProcess(*pid, opts)
		if err != nil {
			return err
		}
		defer proc.Close()
		bin = proc.Binary
	} else {
		path := pos[0]
		if real, err := filepath.EvalSymlinks(path); err == nil {
			path = real // name the file itself, not a link to it
		}
		bin, err = rubybuild.OpenBinary(path, opts)
		if err != nil {
			return err
		}
		defer bin.Close()
	}
	if *format == "go" {
		return writeGoTable([]*rubybuild.Binary{bin}, *source, *configure, stdout, stderr)
	}
	layout, err := bin.Layout()
	if err != nil {
		if proc != nil {
			return fmt.Errorf("pid %d: %w", proc.PID, err)
		}
		return err
	}
	if proc != nil {
		// A layout that is not the build's own DWARF must fit the live process.
		mem := &rubystack.ProcessMemory{PID: proc.PID}
		_, err := rubystack.NewReaderFor(proc, mem, rubybuild.UseSnapshot|rubybuild.UseRecord)
		mem.Close()
		if err != nil {
			return fmt.Errorf("pid %d: %w", proc.PID, err)
		}
	}
	rep := newOffsetsReport(bin, layout)
	if proc != nil {
		rep.addProcess(proc)
	}
	if *format == "json" {
		if err := writeJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		rep.writeText(stdout)
	}
	// The report says what was found; the exit status says whether this
	// build can be profiled at all.
	a := bin.Anchors(layout)
	if err := a.Usable(rubybuild.UseSnapshot | rubybuild.UseRecord); err != nil {
		return bin.Refuse(err)
	}
	return nil
}

// writeGoTables writes the built-in layout table of the Rubies at paths
// (linked binaries with DWARF, or the relocatable layout probes of
// scripts/gen-tables.sh): one Go file in which builds with identical layouts
// share a row.
func writeGoTables(paths []string, opts rubybuild.OpenOptions, source, configure string, stdout, stderr io.Writer) error {
	var bins []*rubybuild.Binary
	defer func() {
		for _, b := range bins {
			b.Close()
		}
	}()
	for _, path := range paths {
		if real, err := filepath.EvalSymlinks(path); err == nil {
			path = real // name the file itself, not a link to it
		}
		bin, err := rubybuild.OpenBinary(path, opts)
		if err != nil {
			return err
		}
		bins = append(bins, bin)
	}
	return writeGoTable(bins, source, configure, stdout, stderr)
}

// writeGoTable writes the table rows of opened Rubies. A build the current
// Layout cannot be resolved from still gets its row (tables store the raw
// structs, and the walker may learn that Ruby later); a warning names what
// it lacks.
func writeGoTable(bins []*rubybuild.Binary, source, configure string, stdout, stderr io.Writer) error {
	var inputs []rubybuild.TableInput
	for _, bin := range bins {
		in, err := bin.TableInput()
		if err != nil {
			return fmt.Errorf("%s: %w", bin.Path, err)
		}
		if err := in.Check(); err != nil {
			fmt.Fprintf(stderr, "rubyperf: warning: Ruby %s (%s): the walker cannot use this layout yet: %v\n",
				in.Version, in.Arch, err)
		}
		// Name the file alone, so a table does not depend on where the build lives.
		in.Source = "DWARF of " + filepath.Base(in.Source)
		inputs = append(inputs, in)
	}
	src, err := rubybuild.GoTables(inputs, source, configure)
	if err != nil {
		return err
	}
	_, err = stdout.Write(src)
	return err
}

// offsetsReport is the JSON document of `rubyperf offsets --format json`.
type offsetsReport struct {
	Version      string                  `json:"version"`
	Arch         string                  `json:"arch"`
	Source       string                  `json:"source"`
	Binary       string                  `json:"binary"`
	BuildID      string                  `json:"build_id,omitempty"`
	DebugFile    string                  `json:"debug_file,omitempty"`
	Structs      map[string]structReport `json:"structs"`
	Constants    map[string]int64        `json:"constants"`
	Capabilities rubybuild.Capabilities  `json:"capabilities"`
	Symbols      map[string]symbolReport `json:"symbols"`
	Process      *processReport          `json:"process,omitempty"`
}

type structReport struct {
	Size        int64            `json:"size"`
	Members     map[string]int64 `json:"members"`
	MemberSizes map[string]int64 `json:"member_sizes"`
}

type symbolReport struct {
	Found     bool   `json:"found"`
	Address   string `json:"address,omitempty"` // file virtual address, hex
	TLSOffset *int64 `json:"tls_offset,omitempty"`
	TPOffset  *int64 `json:"tp_offset,omitempty"`
	How       string `json:"how,omitempty"`
	Why       string `json:"why,omitempty"`
}

type processReport struct {
	PID        int    `json:"pid"`
	MappedPath string `json:"mapped_path"`
	Bias       string `json:"bias"`
	// ThreadPointer and CurrentEC are read live from the main thread.
	ThreadPointer string `json:"thread_pointer,omitempty"`
	CurrentEC     string `json:"current_ec,omitempty"`
	Error         string `json:"error,omitempty"`
}

func newOffsetsReport(bin *rubybuild.Binary, l *rubybuild.Layout) *offsetsReport {
	r := &offsetsReport{
		Version: l.Version.String(), Arch: l.Arch, Source: l.Source, Binary: bin.Path, BuildID: bin.BuildID,
		DebugFile: bin.DebugFile, Structs: map[string]structReport{}, Constants: l.Constants,
		Capabilities: l.Capabilities, Symbols: map[string]symbolReport{},
	}
	for name, sl := range l.Structs {
		sr := structReport{Size: sl.Size, Members: map[string]int64{}, MemberSizes: map[string]int64{}}
		for m, mm := range sl.Members {
			sr.Members[m] = mm.Offset
			sr.MemberSizes[m] = mm.Size
		}
		r.Structs[name] = sr
	}
	anchors := bin.Anchors(l)
	for _, a := range anchors.List() {
		s := symbolReport{Found: a.Found, How: a.How, Why: a.Why}
		if a.Address != 0 {
			s.Address = "0x" + strconv.FormatUint(a.Address, 16)
		}
		if a.Found && a.Name == "ruby_current_ec" {
			tls := a.TLSOffset
			s.TLSOffset = &tls
			if a.HasTPOffset {
				tp := a.TPOffset
				s.TPOffset = &tp
			}
		}
		r.Symbols[a.Name] = s
	}
	return r
}

// addProcess reads the live TLS offset of ruby_current_ec in the process.
func (r *offsetsReport) addProcess(p *rubystack.Process) {
	pr := &processReport{PID: p.PID, MappedPath: p.MappedPath, Bias: "0x" + strconv.FormatUint(p.Bias, 16)}
	r.Process = pr
	l, err := p.Binary.Layout()
	if err != nil {
		pr.Error = err.Error()
		return
	}
	anchors := p.Binary.Anchors(l)
	mem := &rubystack.ProcessMemory{PID: p.PID}
	defer mem.Close()
	tp, err := rubystack.ThreadPointer(p.PID, p.PID)
	if err != nil {
		pr.Error = err.Error()
		return
	}
	pr.ThreadPointer = "0x" + strconv.FormatUint(tp, 16)
	off, err := p.CurrentECOffset(mem, anchors.CurrentEC, tp, nil)
	if err != nil {
		pr.Error = err.Error()
		return
	}
	s := r.Symbols["ruby_current_ec"]
	s.TPOffset = &off
	if !anchors.CurrentEC.HasTPOffset {
		s.How += fmt.Sprintf(", tp_offset from the DTV of thread %d", p.PID)
	}
	r.Symbols["ruby_current_ec"] = s
	if ec, err := rubystack.ReadWord(mem, uint64(int64(tp)+off)); err == nil {
		pr.CurrentEC = "0x" + strconv.FormatUint(ec, 16)
	} else {
		pr.Error = err.Error()
	}
}

// writeText prints the report for people; paths and errors, which a
// target's files chose, are Printable.
func (r *offsetsReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "Ruby %s (%s)\nbinary   %s\n", export.Printable(r.Version), r.Arch, export.Printable(r.Binary))
	if r.BuildID != "" {
		fmt.Fprintf(w, "build-id %s\n", r.BuildID)
	}
	if r.DebugFile != "" {
		fmt.Fprintf(w, "debug    %s\n", export.Printable(r.DebugFile))
	}
	fmt.Fprintf(w, "layout   %s\n", export.Printable(r.Source))
	if p := r.Process; p != nil {
		fmt.Fprintf(w, "process  pid %d, %s loaded at bias %s\n", p.PID, export.Printable(p.MappedPath), p.Bias)
		if p.CurrentEC != "" {
			fmt.Fprintf(w, "         main thread: TP %s, current EC %s\n", p.ThreadPointer, p.CurrentEC)
		}
		if p.Error != "" {
			fmt.Fprintf(w, "         error: %s\n", export.Printable(p.Error))
		}
	}
	fmt.Fprintf(w, "\nsymbols\n")
	for _, name := range sortedKeys(r.Symbols) {
		s := r.Symbols[name]
		switch {
		case !s.Found:
			fmt.Fprintf(w, "  %-24s not found: %s\n", name, export.Printable(s.Why))
		case s.TLSOffset != nil:
			tp := "unknown without a process"
			if s.TPOffset != nil {
				tp = fmt.Sprintf("%d", *s.TPOffset)
			}
			fmt.Fprintf(w, "  %-24s TLS offset %#x, from thread pointer %s (%s)\n", name, *s.TLSOffset, tp, s.How)
		default:
			fmt.Fprintf(w, "  %-24s %s (%s)\n", name, s.Address, s.How)
		}
	}
	fmt.Fprintf(w, "\nstructs\n")
	for _, name := range sortedKeys(r.Structs) {
		sr := r.Structs[name]
		fmt.Fprintf(w, "  %s (size %d)\n", name, sr.Size)
		members := sortedKeys(sr.Members)
		sort.SliceStable(members, func(i, j int) bool { return sr.Members[members[i]] < sr.Members[members[j]] })
		for _, m := range members {
			fmt.Fprintf(w, "    %5d %3d  %s\n", sr.Members[m], sr.MemberSizes[m], m)
		}
	}
	fmt.Fprintf(w, "\nconstants\n")
	for _, name := range sortedKeys(r.Constants) {
		fmt.Fprintf(w, "  %-28s %#x\n", name, r.Constants[name])
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
