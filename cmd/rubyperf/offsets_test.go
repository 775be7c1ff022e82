package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// offsetsJSON runs `rubyperf offsets --format json ARGS` in-process.
func offsetsJSON(t *testing.T, args ...string) offsetsReport {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(append([]string{"offsets", "--format", "json"}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("rubyperf offsets %v: exit %d: %s", args, code, stderr.String())
	}
	var rep offsetsReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("offsets json: %v", err)
	}
	return rep
}

// TestOffsetsMatchPahole checks every struct size and member offset that
// `offsets --format json` reports against pahole, an independent DWARF reader.
func TestOffsetsMatchPahole(t *testing.T) {
	pahole := testskip.Command(t, "pahole", "dwarves")
	for _, name := range []string{"source-3.1-shared", "source-3.3-static"} {
		t.Run(name, func(t *testing.T) {
			r := testruby.Get(t, name)
			rep := offsetsJSON(t, r.VM)
			if !strings.HasPrefix(rep.Source, "dwarf:") {
				t.Fatalf("source = %q, want dwarf", rep.Source)
			}
			if len(rep.Structs) < 15 {
				t.Fatalf("only %d structs reported", len(rep.Structs))
			}
			compared := 0
			for sname, st := range rep.Structs {
				out, err := exec.Command(pahole, "-E", "-C", sname, r.VM).Output()
				if m := paholeTypedef.FindSubmatch(out); err == nil && m != nil {
					// pahole -C found a typedef of a struct declared only in that
					// unit; take the full definition from the whole dump.
					out = paholeBlock(t, pahole, r.VM, string(m[1]))
				}
				if err != nil || len(out) == 0 {
					t.Errorf("pahole -C %s: %v", sname, err)
					continue
				}
				size, members := parsePahole(t, out)
				if size != st.Size {
					t.Errorf("%s: size %d, pahole says %d", sname, st.Size, size)
				}
				for m, off := range st.Members {
					if strings.Contains(m, "->") {
						// A pointee's member (rb_darray), which pahole -C
						// does not expand; the heap census tests read them.
						continue
					}
					poff, ok := members[m]
					if !ok {
						t.Errorf("%s.%s: pahole has no such member", sname, m)
						continue
					}
					if poff != off {
						t.Errorf("%s.%s: offset %d, pahole says %d", sname, m, off, poff)
					}
					compared++
				}
				// Every top-level member pahole knows is reported too.
				for m := range members {
					if _, ok := st.Members[m]; !ok && !strings.Contains(m, ".") {
						t.Errorf("%s.%s: pahole has it, offsets does not", sname, m)
					}
				}
			}
			t.Logf("%s: %d structs, %d member offsets equal to pahole's", name, len(rep.Structs), compared)
		})
	}
}

var (
	paholeMember  = regexp.MustCompile(`^(.*?);\s*/\*\s*(\d+)(?::\s*\d+)?\s+(\d+)\s*\*/`)
	paholeFnName  = regexp.MustCompile(`\(\s*\*\s*(\w+)\s*\)`)
	paholeWord    = regexp.MustCompile(`(\w+)\s*$`)
	paholeSize    = regexp.MustCompile(`/\* size: (\d+),`)
	paholeAttr    = regexp.MustCompile(`__attribute__\(\([^)]*\([^)]*\)\)\)|__attribute__\(\([^)]*\)\)`)
	paholeComment = regexp.MustCompile(`/\*.*?\*/`)
	paholeTypedef = regexp.MustCompile(`^typedef struct (\w+) \w+;\s*$`)
)

// paholeBlock returns the top-level "struct NAME {...};" block of `pahole -E BINARY`.
func paholeBlock(t *testing.T, pahole, binary, name string) []byte {
	all, err := exec.Command(pahole, "-E", binary).Output()
	if err != nil {
		t.Fatalf("pahole -E %s: %v", binary, err)
	}
	start := bytes.Index(all, []byte("\nstruct "+name+" {\n"))
	if start < 0 {
		return nil
	}
	block := all[start+1:]
	if end := bytes.Index(block, []byte("\n};\n")); end >= 0 {
		block = block[:end+3]
	}
	return block
}

// parsePahole reads `pahole -E -C S` output: the struct size, and every
// member (nested ones with dotted names) at its absolute offset.
func parsePahole(t *testing.T, out []byte) (int64, map[string]int64) {
	type frame struct{ members map[string]int64 }
	stack := []frame{{map[string]int64{}}}
	var size int64
	sc := bufio.NewScanner(bytes.NewReader(out))
	first := true
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if first { // "struct NAME {"
			first = false
			continue
		}
		if m := paholeSize.FindStringSubmatch(line); m != nil && len(stack) == 1 {
			size, _ = strconv.ParseInt(m[1], 10, 64)
			continue
		}
		if strings.HasSuffix(line, "{") { // "union {", "/* typedef T */ struct S {"
			stack = append(stack, frame{map[string]int64{}})
			continue
		}
		line = paholeAttr.ReplaceAllString(line, " ")
		m := paholeMember.FindStringSubmatch(line)
		if m == nil {
			continue // comments, enumerators, the closing "};"
		}
		decl := paholeComment.ReplaceAllString(m[1], "")
		off, _ := strconv.ParseInt(m[2], 10, 64)
		closing := strings.HasPrefix(decl, "}")
		name := ""
		if fn := paholeFnName.FindStringSubmatch(decl); fn != nil && !closing {
			name = fn[1]
		} else {
			d := regexp.MustCompile(`:\d+$`).ReplaceAllString(decl, "")
			d = regexp.MustCompile(`(\[[^\]]*\])+$`).ReplaceAllString(strings.TrimSpace(d), "")
			if w := paholeWord.FindStringSubmatch(d); w != nil && !(closing && strings.TrimSpace(d) == "}") {
				name = w[1]
			}
		}
		cur := stack[len(stack)-1].members
		if closing && len(stack) > 1 {
			inner := cur
			stack = stack[:len(stack)-1]
			cur = stack[len(stack)-1].members
			for k, v := range inner {
				if name != "" {
					k = name + "." + k
				}
				if _, dup := cur[k]; !dup {
					cur[k] = v
				}
			}
		}
		if name != "" {
			if _, dup := cur[name]; !dup {
				cur[name] = off
			}
		}
	}
	if size == 0 {
		t.Fatalf("pahole output has no size:\n%s", out)
	}
	return size, stack[0].members
}

// TestOffsetsTableMatchesDWARF checks the committed table of each version
// a test Ruby with DWARF was built from (Debian's sources, as
// scripts/test-rubies.sh builds them) against that build's DWARF. Which
// patch releases the archive serves changes: a build whose version has no
// table of its own is named and left out, and at least one must compare.
// The tables are of builds without YJIT (scripts/gen-tables.sh), which
// appends members to rb_iseq_constant_body: the size of that struct is not
// compared on a build with YJIT, its members are. Where a Debian binary of
// the same version is in the matrix, the table is what rubyperf chooses
// for it, and, for a shared libruby as Debian's, its TLS offset of
// ruby_current_ec is the source build's.
func TestOffsetsTableMatchesDWARF(t *testing.T) {
	compared := 0
	for _, srcRuby := range testruby.WithDWARF(t) {
		t.Run(srcRuby.Name, func(t *testing.T) {
			table, err := rubybuild.BuiltinLayout(srcRuby.Version, "x86_64")
			if err != nil {
				t.Logf("%s is %s: %v (not compared: run scripts/gen-tables.sh prepare %s, then make tables)",
					srcRuby.Name, srcRuby.Version, err, srcRuby.Version)
				return
			}
			compared++
			src := offsetsJSON(t, srcRuby.VM)
			bin, err := rubybuild.OpenBinary(srcRuby.VM, rubybuild.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer bin.Close()
			yjit := slices.ContainsFunc(testruby.JITs, func(j testruby.JIT) bool { return j.Name == "yjit" && j.Has(srcRuby) })
			compareTable(t, *newOffsetsReport(bin, table), src, yjit, srcRuby.Libc)
			shared := strings.HasPrefix(filepath.Base(srcRuby.VM), "libruby")
			for _, debRuby := range testruby.All(t) {
				if debRuby.Kind != "debian" || debRuby.Version != srcRuby.Version {
					continue
				}
				deb := offsetsJSON(t, debRuby.VM)
				if want := "table:" + debRuby.Version + "/x86_64"; deb.Source != want {
					t.Errorf("%s layout source = %q, want %q", debRuby.Name, deb.Source, want)
				}
				if d, s := tlsOffset(deb), tlsOffset(src); shared && (d == "none" || d != s) {
					t.Errorf("%s: ruby_current_ec TLS offset: Debian %s, source build %s", debRuby.Name, d, s)
				}
			}
		})
	}
	if compared == 0 {
		t.Fatal("no test Ruby with DWARF is of a version with a committed table: nothing compared")
	}
}

// tlsOffset is the TLS offset of ruby_current_ec in a report, or "none".
func tlsOffset(r offsetsReport) string {
	if off := r.Symbols["ruby_current_ec"].TLSOffset; off != nil {
		return strconv.FormatInt(*off, 10)
	}
	return "none"
}

// compareTable checks every struct, member and constant of a table's
// report against the DWARF's; yjit: the DWARF's build has YJIT, which the
// table's has not (see TestOffsetsTableMatchesDWARF). libc is the DWARF
// build's C library: the tables are of glibc builds, and against another
// (musl) Ruby's rb_native_thread is larger (thread_pthread.h makes its
// cond a struct of two condition variables, where glibc's may share one
// union), which moves only members the tables do not carry.
func compareTable(t *testing.T, table, dwarf offsetsReport, yjit bool, libc string) {
	t.Helper()
	n := 0
	for sname, st := range table.Structs {
		for m, off := range st.Members {
			if got := dwarf.Structs[sname].Members[m]; got != off {
				t.Errorf("%s.%s: table %d, DWARF %d", sname, m, off, got)
			}
			n++
		}
		switch {
		case st.Size == dwarf.Structs[sname].Size, yjit && sname == "rb_iseq_constant_body":
		case libc != "glibc" && sname == "rb_native_thread":
			t.Logf("%s: table size %d (glibc), DWARF %d (%s)", sname, st.Size, dwarf.Structs[sname].Size, libc)
		default:
			t.Errorf("%s: table size %d, DWARF %d", sname, st.Size, dwarf.Structs[sname].Size)
		}
	}
	for c, v := range table.Constants {
		if dwarf.Constants[c] != v {
			t.Errorf("constant %s: table %d, DWARF %d", c, v, dwarf.Constants[c])
		}
	}
	if n < 50 {
		t.Fatalf("table has only %d members", n)
	}
}
