package rubystack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rubyperf/rubyperf/procmaps"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// Mapping is one line of /proc/PID/maps.
type Mapping = procmaps.Mapping

// ReadMaps parses /proc/PID/maps.
func ReadMaps(pid int) ([]Mapping, error) {
	maps, err := procmaps.Read(pid)
	if err != nil {
		return nil, ProcError(pid, err)
	}
	return maps, nil
}

// Process is a running Ruby: the binary holding its VM and where it is loaded.
type Process struct {
	PID    int
	Binary *rubybuild.Binary
	// Bias is added to a file virtual address to get the address in the process.
	Bias uint64
	// MappedPath is the binary's path as the process sees it.
	MappedPath string
	Maps       []Mapping
}

// OpenProcess finds the Ruby VM in process pid: a mapped libruby, or the
// executable itself for a static ruby. Files are opened through
// /proc/PID/map_files (deleted files) or /proc/PID/root (containers).
func OpenProcess(pid int, opts rubybuild.OpenOptions) (*Process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: not a process id", pid)
	}
	maps, err := ReadMaps(pid)
	if err != nil {
		return nil, err
	}
	if opts.Root == "" {
		opts.Root = fmt.Sprintf("/proc/%d/root", pid)
	}
	var cands []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] && strings.HasPrefix(p, "/") {
			seen[p] = true
			cands = append(cands, p)
		}
	}
	for _, m := range maps {
		if strings.HasPrefix(filepath.Base(m.Path), "libruby") {
			add(m.Path)
		}
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
		add(strings.TrimSuffix(exe, " (deleted)"))
	}
	var tried errorList
	for _, path := range cands {
		first, ok := firstMapping(maps, path)
		if !ok {
			continue
		}
		o := opts
		o.MappedAs = path
		b, err := rubybuild.OpenBinary(openablePath(pid, opts.Root, first), o)
		if err != nil {
			if errors.Is(err, rubybuild.ErrNotRuby) {
				continue
			}
			tried = append(tried, err)
			continue
		}
		start, _ := b.Image()
		return &Process{PID: pid, Binary: b, MappedPath: path, Maps: maps, Bias: first.Start - first.Offset - start}, nil
	}
	for _, err := range tried {
		if errors.Is(err, fs.ErrPermission) {
			return nil, ProcError(pid, err)
		}
	}
	if len(tried) > 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, tried)
	}
	return nil, fmt.Errorf("pid %d: %w (no libruby or Ruby executable is mapped); check the pid", pid, ErrNotRuby)
}

// loaded returns ErrVMNotReady while addr, a variable inside the binary's
// image, is not mapped yet: the loader maps a shared libruby's segments one
// after another, its zero-filled data (where ruby_current_vm_ptr lives)
// last, so a process that was just started can show libruby without it.
// An address outside the image is left for CheckLayout to refuse.
func (p *Process) loaded(addr uint64) error {
	// The loader first reserves the whole image with one mapping of the
	// file, then maps each segment over it: the variable is in place once a
	// writable mapping holds it.
	covered := func(maps []Mapping) bool {
		for _, m := range maps {
			if addr >= m.Start && addr+8 <= m.End {
				return strings.Contains(m.Perms, "w")
			}
		}
		return false
	}
	if addr == 0 || covered(p.Maps) {
		return nil
	}
	if maps, err := ReadMaps(p.PID); err == nil {
		if covered(maps) {
			p.Maps = maps
			return nil
		}
	}
	start, end := p.Binary.Image()
	if addr >= p.Bias+start && addr-p.Bias < end {
		return fmt.Errorf("%w: pid %d: %#x in %s is not mapped yet", ErrVMNotReady, p.PID, addr, p.MappedPath)
	}
	return nil
}

// ErrNotPermitted says this process may not read the target's files or
// memory. It is an fs.ErrPermission too (errors.Is), as the EACCES or
// EPERM it stands for was: a caller that asks only that sees it.
var ErrNotPermitted error = notPermitted{}

type notPermitted struct{}

func (notPermitted) Error() string        { return "permission denied" }
func (notPermitted) Is(target error) bool { return target == fs.ErrPermission }

// ErrNoProcess says the process does not exist (any more).
var ErrNoProcess = errors.New("no such process")

// ErrNotRuby says a process maps no Ruby (yet: a process that was just
// started maps libruby a moment after exec).
var ErrNotRuby = errors.New("not a Ruby process")

// errorList is several errors in one line, each still matched by errors.Is.
type errorList []error

func (l errorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

func (l errorList) Unwrap() []error { return l }

// Close releases the binary.
func (p *Process) Close() error { return p.Binary.Close() }

// firstMapping is the lowest mapping of path (its ELF header, offset 0).
func firstMapping(maps []Mapping, path string) (Mapping, bool) {
	for _, m := range maps {
		if m.Path == path && m.Offset == 0 {
			return m, true
		}
	}
	return Mapping{}, false
}

// openablePath names a file the way this process can open it.
func openablePath(pid int, root string, m Mapping) string {
	mf := fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End)
	if _, err := os.Stat(mf); err == nil {
		return mf
	}
	return filepath.Join(root, m.Path)
}

// ProcError names pid in an error from reading its /proc files, saying
// plainly when the process is gone or may not be read.
func ProcError(pid int, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	case errors.Is(err, fs.ErrPermission) && os.Geteuid() == 0 && hasCapability(capSysPtrace):
		// Root with its capabilities, and still refused: not a matter
		// of privileges this user could be given.
		return fmt.Errorf("pid %d: %w: %v: refused to root too (a process of another user namespace, or one a "+
			"security module such as Yama, SELinux or AppArmor protects)", pid, ErrNotPermitted, err)
	case errors.Is(err, fs.ErrPermission) && hasCapability(capSysPtrace):
		// Its memory may be read: what is refused is a file of its that
		// this user may not read (a Ruby under a home directory of 0700).
		return fmt.Errorf("pid %d: %w: %v: this user may not read the process's files even with CAP_SYS_PTRACE; "+
			"grant CAP_DAC_READ_SEARCH, or run as root", pid, ErrNotPermitted, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("pid %d: %w: reading another user's process needs CAP_SYS_PTRACE; "+
			"record it as its own user, grant CAP_SYS_PTRACE, or run as root", pid, ErrNotPermitted)
	}
	return fmt.Errorf("pid %d: %w", pid, err)
}

// capSysPtrace is CAP_SYS_PTRACE (linux/capability.h).
const capSysPtrace = 19

// hasCapability says whether this process has capability c in effect
// (CapEff of /proc/self/status).
func hasCapability(c uint) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "CapEff:"); ok {
			v, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			return err == nil && v&(1<<c) != 0
		}
	}
	return false
}
