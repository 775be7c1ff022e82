//go:build tables

package rubybuild

// The committed tables checked against configured Ruby source trees under
// $RUBYPERF_CACHE/tables (scripts/gen-tables.sh prepare VERSION): a
// developer's check, run by make tables-check with the tag tables. make test
// does not build these: it prepares no tree (configuring one takes minutes
// and the source of each tabled version, which Debian's archive stops serving
// once a newer patch replaces it, and CI has no other network), and a test
// that cannot run there must not pass by skipping. Meanwhile make test checks
// the committed tables against the test Rubies' DWARF
// (cmd/rubyperf's TestOffsetsTableMatchesDWARF).

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

// probeTree is one configured source tree with its layout probe object.
type probeTree struct {
	version string
	object  string // rubyperf-layout.o
	flags   string // the configure flags it was configured with
}

func probeTrees(t *testing.T) []probeTree {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(cacheDir(), "tables", "*", "ready"))
	var out []probeTree
	for _, ready := range dirs {
		dir := filepath.Dir(ready)
		obj := filepath.Join(dir, "rubyperf-layout.o")
		flags, err := os.ReadFile(filepath.Join(dir, "flags"))
		if err != nil {
			continue
		}
		if _, err := os.Stat(obj); err != nil {
			continue
		}
		out = append(out, probeTree{filepath.Base(dir), obj, strings.TrimSpace(string(flags))})
	}
	if len(out) == 0 {
		t.Fatal("no configured source tree under $RUBYPERF_CACHE/tables: run scripts/gen-tables.sh prepare VERSION")
	}
	return out
}

// TestTablesUpToDate: for every configured tree, the committed table row of
// its version is what its probe's DWARF gives now (run `make tables` after
// changing what the Layout reads, or the probe).
func TestTablesUpToDate(t *testing.T) {
	for _, tree := range probeTrees(t) {
		t.Run(tree.version, func(t *testing.T) {
			in := openTableInput(t, tree.object)
			if in.Version.String() != tree.version {
				t.Fatalf("%s says Ruby %s, its tree is %s", tree.object, in.Version, tree.version)
			}
			row, ok := tableRow(in.Version, in.Arch)
			if !ok {
				t.Fatalf("no built-in row for %s/%s: run make tables", in.Version, in.Arch)
			}
			structs, consts := in.trimmed()
			if !reflect.DeepEqual(structs, row.Structs) {
				for _, name := range unionNames(structs, row.Structs) {
					if !reflect.DeepEqual(structs[name], row.Structs[name]) {
						t.Errorf("%s: DWARF %+v, table %+v", name, structs[name], row.Structs[name])
					}
				}
			}
			if !reflect.DeepEqual(consts, row.Constants) {
				t.Errorf("constants: DWARF %v, table %v", consts, row.Constants)
			}
			if row.Configure != tree.flags {
				t.Errorf("configure flags: tree %q, table %q", tree.flags, row.Configure)
			}
			if t.Failed() {
				t.Log("the table is stale: run make tables")
			}
		})
	}
}

// TestProbeEqualsFullBuild: a layout probe gives the same layout as the
// DWARF of a full build of the same version (the test Rubies built from
// source by scripts/test-rubies.sh, described by their manifest files).
func TestProbeEqualsFullBuild(t *testing.T) {
	trees := map[string]probeTree{}
	for _, tr := range probeTrees(t) {
		trees[tr.version] = tr
	}
	manifests, _ := filepath.Glob(filepath.Join(cacheDir(), "ruby", "*", "manifest"))
	compared := 0
	for _, m := range manifests {
		kv := readManifest(m)
		// Only source builds with their DWARF, built with the table's flags
		// (a flavor expected to be refused was built with others).
		if kv["dwarf"] != "1" || kv["vm"] == "" || kv["expect"] != "" {
			continue
		}
		tree, ok := trees[kv["version"]]
		if !ok {
			continue
		}
		name := filepath.Base(filepath.Dir(m))
		t.Run(name, func(t *testing.T) {
			full := openTableInput(t, kv["vm"])
			probe := openTableInput(t, tree.object)
			fs, fc := full.trimmed()
			ps, pc := probe.trimmed()
			used := usedMembers()
			for _, n := range unionNames(fs, ps) {
				f, p := fs[n], ps[n]
				if !reflect.DeepEqual(f.Members, p.Members) {
					t.Errorf("%s: full build %+v, probe %+v", n, f.Members, p.Members)
				}
				// A struct's size is compared where the Layout reads it; elsewhere it
				// may differ with configure flags (a build with YJIT has a longer
				// rb_iseq_constant_body) without moving anything rubyperf reads.
				if f.Size != p.Size {
					if used[n+"."] {
						t.Errorf("%s: size: full build %d, probe %d", n, f.Size, p.Size)
					} else {
						t.Logf("%s: size: full build %d, probe %d (not read; configure flags differ?)", n, f.Size, p.Size)
					}
				}
			}
			if !reflect.DeepEqual(fc, pc) {
				t.Errorf("constants: full build %v, probe %v", fc, pc)
			}
		})
		compared++
	}
	if compared == 0 {
		testskip.IfNotSupported(t, testskip.Missing("a full source build of a version with a configured tree",
			"scripts/test-rubies.sh builds them; scripts/gen-tables.sh prepare VERSION configures a tree", nil))
	}
}

func readManifest(path string) map[string]string {
	kv := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return kv
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// TestProbeEqualsPahole: pahole, an independent DWARF reader, sees the same
// top-level member offsets and struct sizes in a probe object.
func TestProbeEqualsPahole(t *testing.T) {
	testskip.Command(t, "pahole", "dwarves")
	trees := probeTrees(t)
	sort.Slice(trees, func(i, j int) bool { return trees[i].version < trees[j].version })
	pick := []probeTree{trees[0]}
	if len(trees) > 1 {
		pick = append(pick, trees[len(trees)-1])
	}
	for _, tree := range pick {
		in := openTableInput(t, tree.object)
		for _, name := range []string{"rb_control_frame_struct", "rb_execution_context_struct",
			"rb_thread_struct", "rb_iseq_struct", "rb_iseq_constant_body", "rb_callable_method_entry_struct",
			"RString", "succ_index_table", "succ_dict_block"} {
			sl, ok := in.Structs[name]
			if !ok {
				continue
			}
			t.Run(tree.version+"/"+name, func(t *testing.T) {
				out, err := exec.Command("pahole", "-C", name, tree.object).Output()
				if err != nil {
					t.Fatalf("pahole -C %s: %v", name, err)
				}
				size, members := parsePahole(out)
				if size != sl.Size {
					t.Errorf("size: pahole %d, rubyperf %d", size, sl.Size)
				}
				if len(members) == 0 {
					t.Fatalf("no member read from pahole's output:\n%s", out)
				}
				t.Logf("comparing the size and %d top-level members with pahole", len(members))
				for m, off := range members {
					got, ok := sl.Members[m]
					if !ok {
						t.Errorf("%s: pahole has it at %d, rubyperf does not", m, off)
					} else if got.Offset != off {
						t.Errorf("%s: pahole %d, rubyperf %d", m, off, got.Offset)
					}
				}
			})
		}
	}
}

var (
	paholeMember    = regexp.MustCompile(`^\t[^\t/].*?\b(\w+)(\[\d*\])*(:\d+)?;\s+/\*\s+(\d+)(:\s*\d+)?\s+\d+\s+\*/`)
	paholeSize      = regexp.MustCompile(`/\* size: (\d+),`)
	paholeNestedEnd = regexp.MustCompile(`^\t\}\s*(\w+);\s+/\*\s+(\d+)\s+\d+\s+\*/`)
	paholeAttr      = regexp.MustCompile(` __attribute__\(\((?:[^()]|\([^()]*\))*\)\)`)
)

// parsePahole reads the top-level members (one tab deep, not nested
// struct bodies) and the size from `pahole -C` output.
func parsePahole(out []byte) (int64, map[string]int64) {
	members := map[string]int64{}
	var size int64 = -1
	depth := 0
	for _, line := range strings.Split(string(out), "\n") {
		line = paholeAttr.ReplaceAllString(line, "")
		before := depth
		depth += strings.Count(line, "{") - strings.Count(line, "}")
		if before == 1 {
			if m := paholeMember.FindStringSubmatch(line); m != nil {
				off, _ := strconv.ParseInt(m[4], 10, 64)
				members[m[1]] = off
			}
		} else if depth == 1 {
			// The end of a nested struct or union member: "} as; /* 16 24 */".
			if m := paholeNestedEnd.FindStringSubmatch(line); m != nil {
				off, _ := strconv.ParseInt(m[2], 10, 64)
				members[m[1]] = off
			}
		}
		if m := paholeSize.FindStringSubmatch(line); m != nil && size < 0 {
			size, _ = strconv.ParseInt(m[1], 10, 64)
		}
	}
	return size, members
}
