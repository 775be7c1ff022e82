package packaging

import (
	"bufio"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// app is the program recorded in the tests: one method burns the CPU.
const app = `def packaged_hot_method
  x = 0
  200_000.times { |i| x += i * i }
  x
end
t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
packaged_hot_method while Process.clock_gettime(Process::CLOCK_MONOTONIC) - t < 3
`

// make runs make with args in the repository, bounded, and returns the
// repository's root.
func make(t *testing.T, args ...string) string {
	t.Helper()
	repo, err := testruby.RepoPath(".")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", append([]string{"-s"}, args...)...)
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return repo
}

// run runs a command, bounded, and returns its output; it fails the test
// on an error, with the output.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestStaticBinary: make static builds a binary that asks nothing of the
// system it runs on (no interpreter, no shared library); make install puts
// it under DESTDIR and PREFIX with the agent's unit pointing at it; and in
// a root that holds only it and a recording, `rubyperf version` and
// `rubyperf report` run and name the recorded Ruby method.
func TestStaticBinary(t *testing.T) {
	testskip.Root(t, "it records, and chroots into an empty root")
	repo := make(t, "static")
	bin := filepath.Join(repo, "dist", "rubyperf")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s asks for an interpreter (a dynamic loader): not static", bin)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s needs shared libraries %q (%v)", bin, libs, err)
	}
	f.Close()

	dest := t.TempDir()
	make(t, "install", "DESTDIR="+dest, "PREFIX=/opt/rp")
	if fi, err := os.Stat(filepath.Join(dest, "opt/rp/bin/rubyperf")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("make install put no executable at PREFIX/bin/rubyperf under DESTDIR: %v", err)
	}
	if unit, err := os.ReadFile(filepath.Join(dest, "opt/rp/lib/systemd/system/rubyperf-agent.service")); err != nil ||
		!strings.Contains(string(unit), "\nExecStart=/opt/rp/bin/rubyperf agent ") {
		t.Errorf("make install's agent unit does not run PREFIX/bin/rubyperf: %v", err)
	}

	root := t.TempDir()
	if b, err := os.ReadFile(bin); err != nil || os.WriteFile(filepath.Join(root, "rubyperf"), b, 0o755) != nil {
		t.Fatalf("copy %s: %v", bin, err)
	}
	ruby := testskip.Command(t, "ruby", "ruby3.1")
	script := filepath.Join(t.TempDir(), "app.rb")
	if err := os.WriteFile(script, []byte(app), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(root, "app.data")
	if out, err := exec.Command(bin, "record", "-F", "499", "-o", rec, "--", ruby, script).CombinedOutput(); err != nil {
		testskip.Privileged(t, fmt.Errorf("%s record: %w\n%s", bin, err, out))
		t.Fatalf("%s record: %v\n%s", bin, err, out)
	}
	if out := run(t, "chroot", root, "/rubyperf", "version"); !strings.HasPrefix(out, "rubyperf 0.0.0~git") {
		t.Errorf("rubyperf version in an empty root: %q, want make's version stamp", out)
	}
	if out := run(t, "chroot", root, "/rubyperf", "report", "-i", "/app.data", "-n", "5"); !strings.Contains(out, "Object#packaged_hot_method") {
		t.Errorf("rubyperf report in an empty root names no Object#packaged_hot_method:\n%s", out)
	}
}

// TestDebianPackage: make deb's package installs on a fresh Debian root
// with Ruby and nothing else (bookworm and trixie, each with dpkg -i and
// with apt-get install ./FILE), puts the binary on the PATH and the agent's unit in
// systemd's directory, pointing at it, and there `rubyperf record -- ruby
// app.rb` and `rubyperf report` name the recorded method.
func TestDebianPackage(t *testing.T) {
	testskip.Root(t, "it installs the package into Debian roots and records in them")
	mmdebstrap := testskip.Command(t, "mmdebstrap", "mmdebstrap")
	repo := make(t, "deb")
	debs, _ := filepath.Glob(filepath.Join(repo, "dist", "rubyperf_*_amd64.deb"))
	if len(debs) == 0 {
		t.Fatal("make deb made no dist/rubyperf_*_amd64.deb")
	}
	deb := newest(debs)
	type install struct{ suite, how, install string }
	var installs []install
	for _, suite := range []string{"bookworm", "trixie"} {
		installs = append(installs, install{suite, "dpkg", "dpkg -i /tmp/rubyperf.deb"},
			install{suite, "apt", "apt-get install -y -q /tmp/rubyperf.deb"})
	}
	for _, c := range installs {
		t.Run(c.suite+"/"+c.how, func(t *testing.T) {
			root := freshRoot(t, mmdebstrap, c.suite)
			b, err := os.ReadFile(deb)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "tmp", "rubyperf.deb"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "tmp", "app.rb"), []byte(app), 0o644); err != nil {
				t.Fatal(err)
			}
			out := inRoot(t, root, c.install+` >/tmp/install.log 2>&1 || { cat /tmp/install.log; exit 1; }
command -v rubyperf
grep '^ExecStart=' /usr/lib/systemd/system/rubyperf-agent.service
cd /tmp && rubyperf record -F 499 -- ruby /tmp/app.rb && rubyperf report -n 5`)
			t.Logf("%s", out)
			if !strings.Contains(out, "/usr/bin/rubyperf\n") {
				t.Errorf("%s: rubyperf is not /usr/bin/rubyperf on the PATH", c.suite)
			}
			if !strings.Contains(out, "ExecStart=/usr/bin/rubyperf agent") {
				t.Errorf("%s: the agent's unit does not run /usr/bin/rubyperf", c.suite)
			}
			if !strings.Contains(out, "Object#packaged_hot_method") {
				t.Errorf("%s: the report names no Object#packaged_hot_method", c.suite)
			}
		})
	}
}

// newest is the path of paths last modified.
func newest(paths []string) string {
	best, at := "", time.Time{}
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.ModTime().After(at) {
			best, at = p, fi.ModTime()
		}
	}
	return best
}

// freshRoot unpacks a Debian root of suite with Ruby into a temporary
// directory: mmdebstrap's tarball, made once into the cache
// ($RUBYPERF_CACHE/roots) from the Debian archive.
func freshRoot(t *testing.T, mmdebstrap, suite string) string {
	t.Helper()
	dir := filepath.Join(testruby.Cache(), "roots")
	tarball := filepath.Join(dir, suite+".tar")
	if _, err := os.Stat(tarball); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		partial := filepath.Join(dir, suite+".partial.tar")
		run(t, mmdebstrap, "--quiet", "--variant=apt", "--format=tar", "--include=ruby", suite, partial, debianMirror(t))
		if err := os.Rename(partial, tarball); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(t.TempDir(), suite)
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	// The cleanup must never remove through a mount (the host's /dev):
	// the mounts live in inRoot's own namespace, and this checks it.
	t.Cleanup(func() {
		if m := mountedUnder(root); m != "" {
			t.Errorf("%s is still mounted: %s left in place", m, root)
			t.FailNow()
		}
	})
	run(t, "tar", "-xf", tarball, "-C", root)
	return root
}

// debianMirror is the Debian archive this machine's apt uses: the first
// URI of its sources that is not the security archive. The roots come
// from where this machine's packages come from, nowhere else.
func debianMirror(t *testing.T) string {
	t.Helper()
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	for _, f := range append([]string{"/etc/apt/sources.list"}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			switch {
			case len(fields) >= 2 && fields[0] == "URIs:" && !strings.Contains(fields[1], "security"):
				return fields[1]
			case len(fields) >= 3 && fields[0] == "deb" && !strings.HasPrefix(fields[1], "[") && !strings.Contains(fields[1], "security"):
				return fields[1]
			}
		}
	}
	t.Fatal("no Debian archive in this machine's apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d): the roots are made from it")
	return ""
}

// inRoot runs script with sh in root, with the host's /proc, /sys and /dev
// mounted there in a mount namespace of its own (gone when it exits).
func inRoot(t *testing.T, root, script string) string {
	t.Helper()
	mounts := fmt.Sprintf("set -e; for d in proc sys dev; do mount --rbind /$d %[1]s/$d; done; exec chroot %[1]s /bin/sh -c \"$0\"", root)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "sh", "-c", mounts, "set -e\n"+script)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "HOME=/root"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in a fresh root: %v\n%s", err, out)
	}
	return string(out)
}

// mountedUnder returns a mount point at or under dir in this mount
// namespace, or "".
func mountedUnder(dir string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "/proc/self/mountinfo unreadable"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			return fields[4]
		}
	}
	return ""
}
