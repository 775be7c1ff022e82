package rubybuild

import (
	"bytes"
	"errors"
	"fmt"
	"go/format"
	"sort"
	"strings"
)

// tableLayout is one built-in layout: the structs and constants shared by the
// Ruby versions it lists on one arch, generated from DWARF by `rubyperf
// offsets --format go` (files table_*.go, one per minor line and arch, each
// distinct layout once). It is used for Rubies that ship without debug
// information, such as Debian's stripped libruby.
type tableLayout struct {
	Versions  []string // every release with exactly this layout
	Arch      string
	Source    string // the DWARF it was generated from
	Configure string // the configure flags the layout assumes, when known
	Structs   Structs
	Constants map[string]int64
}

// builtinLayouts is filled by the generated table_*.go files.
var builtinLayouts []tableLayout

// tableKeys lists every built-in version and arch, "VERSION/ARCH", in order.
func tableKeys() []string {
	var out []string
	for _, r := range builtinLayouts {
		for _, v := range r.Versions {
			out = append(out, v+"/"+r.Arch)
		}
	}
	sort.Slice(out, func(i, j int) bool { return keyLess(out[i], out[j]) })
	return out
}

// keyLess orders "VERSION/ARCH" keys by arch, then by version number.
func keyLess(a, b string) bool {
	va, aa, _ := strings.Cut(a, "/")
	vb, ab, _ := strings.Cut(b, "/")
	if aa != ab {
		return aa < ab
	}
	x, errA := ParseVersion(va)
	y, errB := ParseVersion(vb)
	if errA != nil || errB != nil || x == y {
		return a < b
	}
	return x.Less(y)
}

// tableRow returns the built-in layout of exactly version v on arch.
// BuiltinLayout returns the built-in table layout for a version and arch.
func BuiltinLayout(version, arch string) (*Layout, error) {
	v, err := ParseVersion(version)
	if err != nil {
		return nil, err
	}
	row, ok := tableRow(v, arch)
	if !ok {
		return nil, fmt.Errorf("no built-in layout for Ruby %s %s", version, arch)
	}
	return resolveLayout(v, arch, "table:"+version+"/"+arch, row.Structs, row.Constants)
}

func tableRow(v Version, arch string) (tableLayout, bool) {
	want := v.String()
	for _, r := range builtinLayouts {
		if r.Arch != arch {
			continue
		}
		for _, rv := range r.Versions {
			if rv == want {
				return r, true
			}
		}
	}
	return tableLayout{}, false
}

// TableInput is the raw layout of one Ruby build, as its DWARF gives it,
// before any resolution into a Layout: what a built-in table row stores. It
// is read even when the current Layout cannot be resolved from it (a Ruby the
// walker does not support yet), so tables can be generated ahead of the walker.
type TableInput struct {
	Version   Version
	Arch      string
	Source    string // e.g. "DWARF of libruby.so.3.3.8"
	Structs   Structs
	Constants map[string]int64
}

// TableInput reads this build's raw structs and constants from its DWARF
// (the binary's own or its debug file's).
func (b *Binary) TableInput() (TableInput, error) {
	structs, consts, src, err := b.dwarfStructs()
	if err != nil {
		return TableInput{}, err
	}
	return TableInput{Version: b.Version, Arch: b.Arch, Source: strings.TrimPrefix(src, "dwarf:"),
		Structs: structs, Constants: consts}, nil
}

// Check says whether the current Layout can be resolved from the input: nil,
// or the error naming what it lacks.
func (in TableInput) Check() error {
	_, err := resolveLayout(in.Version, in.Arch, "table", in.Structs, in.Constants)
	return err
}

// Resolve makes the Layout the input describes; source says where it came
// from (e.g. "table:3.3.8/x86_64", "fixture:PATH").
func (in TableInput) Resolve(source string) (*Layout, error) {
	return resolveLayout(in.Version, in.Arch, source, in.Structs, in.Constants)
}

// TableInput is what l was resolved from: its raw structs and constants.
func (l *Layout) TableInput() TableInput {
	return TableInput{Version: l.Version, Arch: l.Arch, Source: l.Source, Structs: l.Structs, Constants: l.Constants}
}

// Trimmed keeps only the members the Layout reads and the constants it
// knows: what a table row or a saved layout stores.
func (in TableInput) Trimmed() TableInput {
	structs, consts := in.trimmed()
	in.Structs, in.Constants = structs, consts
	return in
}

func (in TableInput) trimmed() (Structs, map[string]int64) {
	used := usedMembers()
	structs := Structs{}
	for name, sl := range in.Structs {
		if !used[name+"."] && !hasPrefixIn(used, name+".") {
			continue
		}
		out := StructLayout{Size: sl.Size, Members: map[string]Member{}}
		for m, mm := range sl.Members {
			if used[name+"."+m] {
				out.Members[m] = mm
			}
		}
		structs[name] = out
	}
	consts := map[string]int64{}
	for n, v := range in.Constants {
		if wantedConstants[n] {
			consts[n] = v
		}
	}
	return structs, consts
}

// GoTables writes the generated Go file holding the built-in rows for inputs:
// builds with identical layouts (structs, constants, arch) become one row
// listing all their versions. configure records the configure flags the
// layouts assume ("" when unknown); source, when not "", replaces the inputs'
// own source descriptions.
func GoTables(inputs []TableInput, source, configure string) ([]byte, error) {
	if len(inputs) == 0 {
		return nil, errors.New("go tables: no inputs")
	}
	type row struct {
		versions []Version
		sources  []string
		arch     string
		body     string // the Structs and Constants literals
	}
	var rows []*row
	byBody := map[string]*row{}
	seen := map[string]bool{}
	for _, in := range inputs {
		key := in.Version.String() + "/" + in.Arch
		if seen[key] {
			return nil, fmt.Errorf("go tables: Ruby %s given twice", key)
		}
		seen[key] = true
		structs, consts := in.trimmed()
		body := in.Arch + "\x00" + goLiterals(structs, consts)
		r := byBody[body]
		if r == nil {
			r = &row{arch: in.Arch, body: goLiterals(structs, consts)}
			byBody[body] = r
			rows = append(rows, r)
		}
		r.versions = append(r.versions, in.Version)
		src := in.Source
		if source != "" {
			src = source
		}
		if !containsString(r.sources, src) {
			r.sources = append(r.sources, src)
		}
	}
	for _, r := range rows {
		sort.Slice(r.versions, func(i, j int) bool { return r.versions[i].Less(r.versions[j]) })
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].arch != rows[j].arch {
			return rows[i].arch < rows[j].arch
		}
		return rows[i].versions[0].Less(rows[j].versions[0])
	})

	var buf bytes.Buffer
	fmt.Fprintf(&buf, "// Code generated by \"rubyperf offsets --format go\"; DO NOT EDIT.\n\n")
	fmt.Fprintf(&buf, "package rubybuild\n\n")
	fmt.Fprintf(&buf, "func init() {\n\tbuiltinLayouts = append(builtinLayouts,\n")
	for _, r := range rows {
		vs := make([]string, len(r.versions))
		for i, v := range r.versions {
			vs[i] = fmt.Sprintf("%q", v.String())
		}
		fmt.Fprintf(&buf, "\t\ttableLayout{\n")
		fmt.Fprintf(&buf, "\t\t\tVersions: []string{%s},\n", strings.Join(vs, ", "))
		fmt.Fprintf(&buf, "\t\t\tArch: %q,\n\t\t\tSource: %q,\n", r.arch, strings.Join(r.sources, "; "))
		if configure != "" {
			fmt.Fprintf(&buf, "\t\t\tConfigure: %q,\n", configure)
		}
		buf.WriteString(r.body)
		fmt.Fprintf(&buf, "\t\t},\n")
	}
	fmt.Fprintf(&buf, "\t)\n}\n")
	return format.Source(buf.Bytes())
}

// goLiterals spells the Structs and Constants fields of one row, in a fixed
// order so identical layouts give identical text.
func goLiterals(structs Structs, consts map[string]int64) string {
	var buf strings.Builder
	fmt.Fprintf(&buf, "\t\t\tStructs: Structs{\n")
	for _, name := range structs.Names() {
		sl := structs[name]
		fmt.Fprintf(&buf, "\t\t\t\t%q: {Size: %d, Members: map[string]Member{\n", name, sl.Size)
		for _, m := range sl.MemberNames() {
			mm := sl.Members[m]
			fmt.Fprintf(&buf, "\t\t\t\t\t%q: {Offset: %d, Size: %d", m, mm.Offset, mm.Size)
			if mm.BitSize > 0 {
				fmt.Fprintf(&buf, ", BitOffset: %d, BitSize: %d", mm.BitOffset, mm.BitSize)
			}
			fmt.Fprintf(&buf, "},\n")
		}
		fmt.Fprintf(&buf, "\t\t\t\t}},\n")
	}
	fmt.Fprintf(&buf, "\t\t\t},\n\t\t\tConstants: map[string]int64{\n")
	names := make([]string, 0, len(consts))
	for n := range consts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&buf, "\t\t\t\t%q: %d,\n", n, consts[n])
	}
	fmt.Fprintf(&buf, "\t\t\t},\n")
	return buf.String()
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func hasPrefixIn(set map[string]bool, prefix string) bool {
	for k := range set {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}
