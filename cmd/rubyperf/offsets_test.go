package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
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

// TestOffsetsTableMatchesDWARF checks the built-in table used for a Debian
// binary against the DWARF of the same version built from Debian's source.
// Which patch releases the archive serves (and which sources it lets us
// download) changes: the test pairs whatever binary has the source build's
// version, and when that binary's version has no table of its own (a release
// newer than the tables) the nearest table is only reported, as it is
// checked live before use.
func TestOffsetsTableMatchesDWARF(t *testing.T) {
	srcRuby := testruby.Get(t, "source-3.1-shared")
	var debRuby testruby.Ruby
	for _, r := range testruby.All(t) {
		if r.Kind == "debian" && r.Version == srcRuby.Version {
			debRuby = r
		}
	}
	if debRuby.Name == "" {
		t.Logf("no Debian binary of %s, the source Debian lets us download: nothing to compare", srcRuby.Version)
		return
	}
	deb := offsetsJSON(t, debRuby.VM)
	src := offsetsJSON(t, srcRuby.VM)
	if !strings.HasPrefix(deb.Source, "table:") {
		t.Fatalf("%s layout source = %q, want a built-in table", debRuby.Name, deb.Source)
	}
	if deb.Source != "table:"+debRuby.Version+"/x86_64" {
		t.Logf("%s is %s, newer than the tables (%s): run 'make tables' with its source", debRuby.Name, debRuby.Version, deb.Source)
		return
	}
	n := 0
	for sname, st := range deb.Structs {
		for m, off := range st.Members {
			if got := src.Structs[sname].Members[m]; got != off {
				t.Errorf("%s.%s: table %d, DWARF %d", sname, m, off, got)
			}
			n++
		}
		if st.Size != src.Structs[sname].Size {
			t.Errorf("%s: table size %d, DWARF %d", sname, st.Size, src.Structs[sname].Size)
		}
	}
	for c, v := range deb.Constants {
		if src.Constants[c] != v {
			t.Errorf("constant %s: table %d, DWARF %d", c, v, src.Constants[c])
		}
	}
	if n < 50 {
		t.Fatalf("table has only %d members", n)
	}
	if deb.Symbols["ruby_current_ec"].TLSOffset == nil || *deb.Symbols["ruby_current_ec"].TLSOffset != *src.Symbols["ruby_current_ec"].TLSOffset {
		t.Errorf("ruby_current_ec TLS offset: Debian %v, source build %v", deb.Symbols["ruby_current_ec"], src.Symbols["ruby_current_ec"])
	}
}
