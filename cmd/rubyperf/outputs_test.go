package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

// TestOutputsRefusePlantedFiles runs record, convert and inject as root
// with their output in a directory where another user could have planted
// something at the path: a symbolic link to a file of theirs is replaced,
// never written through; a FIFO, a device (a copy of /dev/null) and a hard
// link are refused in one line naming the path, before anything is read,
// and left as they were.
func TestOutputsRefusePlantedFiles(t *testing.T) {
	r := testruby.Get(t, "debian-3.1")
	target := testruby.Start(t, r, "-e", `STDOUT.puts "ready"; STDOUT.flush; x = 0; loop { x += 1 }`)
	pid := strconv.Itoa(target.Process.Pid)
	dir := t.TempDir()
	recorded := filepath.Join(dir, "rubyperf.data")
	record(t, "-F", "99", "-d", "1", "-o", recorded, "-p", pid)

	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	plant := map[string]func(path string) error{
		"symbolic link": func(p string) error { return os.Symlink(victim, p) },
		"FIFO":          func(p string) error { return syscall.Mkfifo(p, 0o666) },
		"character device": func(p string) error {
			return syscall.Mknod(p, syscall.S_IFCHR|0o666, int(1<<8|3)) // 1:3, /dev/null's numbers
		},
		"hard link": func(p string) error { return os.Link(victim, p) },
	}
	commands := map[string][]string{
		"record":  {"record", "-F", "99", "-d", "1", "-p", pid, "-o"},
		"convert": {"convert", "-i", recorded, "-f", "svg", "-o"},
		"inject":  {"inject", "-i", recorded, "--map-dir", dir, "-o"},
	}
	for cmdName, args := range commands {
		for what, mk := range plant {
			t.Run(cmdName+"/"+what, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "out")
				if err := mk(path); err != nil {
					t.Fatal(err)
				}
				before, _ := os.Lstat(path)
				var stdout, stderr bytes.Buffer
				code := run(append(args[:len(args):len(args)], path), &stdout, &stderr)
				msg := strings.TrimRight(stderr.String(), "\n")
				if b, _ := os.ReadFile(victim); string(b) != "precious" {
					t.Fatalf("the victim file now holds %.40q", b)
				}
				if what == "symbolic link" {
					st, err := os.Lstat(path)
					if code != 0 || err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
						t.Errorf("exit %d, path now %v (%v): want the link replaced by the output: %s", code, st.Mode(), err, msg)
					}
					return
				}
				if code != 1 || strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "rubyperf: "+path+": ") ||
					!strings.Contains(msg, strings.Fields(what)[0]) {
					t.Errorf("exit %d, stderr %q: want one line naming %s and the %s", code, msg, path, what)
				}
				after, err := os.Lstat(path)
				if err != nil || after.Mode() != before.Mode() || !os.SameFile(before, after) {
					t.Errorf("the %s was replaced: %v (%v)", what, after.Mode(), err)
				}
				if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
					t.Errorf("%d entries beside the output, want none left behind", len(entries)-1)
				}
			})
		}
	}
}
