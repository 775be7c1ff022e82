package perfmap

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rubyperf/rubyperf/internal/safefile"
)

// DefaultDir is the directory perf reads perf maps from; it reads no other.
const DefaultDir = "/tmp"

// Mode is the permission a new perf map is created with, before the
// umask: readable by all, like the maps YJIT and ZJIT create (0666 less
// the umask), so that perf can read it at report time as another user than
// the one that recorded.
const Mode = 0o644

// DefaultLockTimeout is how long Open waits for another writer's lock.
const DefaultLockTimeout = 10 * time.Second

// maxName is the longest name written: a line must fit in MaxLine.
const maxName = MaxLine - 64

// minName is the shortest name perf 6.1 keeps: dso__load_perf_map skips
// a line unless more than two bytes follow the size's separator.
const minName = 3

// writeChunk is the most bytes appended by one write(2), unless a single
// line is longer.
const writeChunk = 64 << 10

// ErrRefused is matched (with errors.Is) by the error Open and ReadFile
// return when the path holds something they must not use: a symbolic
// link, a directory, a FIFO or other non-regular file, a file with
// several hard links, or, for writing, a file owned by another user.
var ErrRefused = errors.New("refused")

// refusedError says what is at a path and what to do about it, on one line.
type refusedError struct{ path, what, fix string }

func (e *refusedError) Error() string {
	return fmt.Sprintf("perf map %s: refused: %s; %s", e.path, e.what, e.fix)
}

func (e *refusedError) Is(target error) bool { return target == ErrRefused }

// Path returns the perf map of process pid in dir ("" means DefaultDir).
func Path(dir string, pid int) string {
	if dir == "" {
		dir = DefaultDir
	}
	return filepath.Join(dir, "perf-"+strconv.Itoa(pid)+".map")
}

// Owner is a user and group, the owner of the process a perf map describes.
type Owner struct{ UID, GID int }

// Options configure Open. The zero value (or nil) accepts only a map owned
// by the caller's effective uid and waits DefaultLockTimeout for the lock.
type Options struct {
	// Owner, when set, is the owner of the process whose map it is: its
	// effective uid and gid (the second fields of Uid: and Gid: in
	// /proc/PID/status), which the files it creates get. A map owned by
	// Owner.UID is then accepted as well as one owned by the caller: the
	// process's own --yjit-perf or --zjit-perf creates the map as that
	// user. A map that Open creates is given to Owner, so that the process
	// can still open it to append: YJIT panics (an unwrap on the open)
	// when it cannot.
	Owner *Owner
	// LockTimeout bounds the wait for another writer's lock; 0 means
	// DefaultLockTimeout.
	LockTimeout time.Duration
}

// Map is a perf map opened for appending and locked against other
// writers that lock it (flock LOCK_EX), until Close. YJIT and ZJIT do not
// lock: see Append for how lines stay whole beside them.
type Map struct {
	f       *os.File
	path    string
	created bool
}

// Open opens the perf map of process pid in dir ("" means DefaultDir),
// creating it with Mode if it does not exist, and locks it. It never
// truncates, follows a symbolic link, or opens anything but a regular file
// with one link owned by the caller (or by opts.Owner): the tool runs as
// root in a shared /tmp, where anyone can plant a link or a FIFO at the
// map's path. An existing file is opened without O_CREAT, which
// fs.protected_regular forbids on another user's file in a sticky
// directory even to root. The checks run on lstat before opening, so a
// FIFO or device is never opened, and again on the open descriptor, which
// must be the inode that was checked (O_NOFOLLOW, O_NONBLOCK).
func Open(dir string, pid int, opts *Options) (*Map, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("perf map: bad pid %d", pid)
	}
	if opts == nil {
		opts = &Options{}
	}
	path := Path(dir, pid)
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	deadline := time.Now().Add(timeout)
	for range 5 {
		f, created, err := openChecked(path, opts)
		if err != nil {
			return nil, err
		}
		if err := lock(f, path, deadline, timeout); err != nil {
			f.Close()
			return nil, err
		}
		// The path may have been replaced while we waited (a stale map
		// removed, a new one created): write where perf will read.
		same, err := samePath(f, path)
		if err != nil {
			f.Close()
			return nil, err
		}
		if same {
			return &Map{f: f, path: path, created: created}, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("perf map %s: it kept being replaced while being opened; retry when nothing else writes it", path)
}

// openChecked opens path for appending, or creates it, after checking what
// is there, and checks the descriptor again.
func openChecked(path string, opts *Options) (*os.File, bool, error) {
	euid := os.Geteuid()
	for range 5 {
		var pre syscall.Stat_t
		err := syscall.Lstat(path, &pre)
		exists := err == nil
		if err != nil && !errors.Is(err, syscall.ENOENT) {
			return nil, false, fmt.Errorf("perf map %s: %w", path, err)
		}
		if exists {
			if err := check(path, &pre, euid, opts.Owner, true); err != nil {
				return nil, false, err
			}
		}
		flags := syscall.O_RDWR | syscall.O_APPEND | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_CLOEXEC
		if !exists {
			flags |= syscall.O_CREAT | syscall.O_EXCL
		}
		fd, err := syscall.Open(path, flags, Mode)
		switch {
		case exists && errors.Is(err, syscall.ENOENT), !exists && errors.Is(err, syscall.EEXIST):
			continue // removed or created meanwhile: look again
		case err != nil:
			return nil, false, openError(path, err)
		}
		f := os.NewFile(uintptr(fd), path)
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			f.Close()
			return nil, false, fmt.Errorf("perf map %s: fstat: %w", path, err)
		}
		if err := check(path, &st, euid, opts.Owner, exists); err != nil {
			f.Close()
			return nil, false, err
		}
		if exists && (st.Dev != pre.Dev || st.Ino != pre.Ino) {
			f.Close()
			continue // replaced between lstat and open
		}
		if !exists && opts.Owner != nil && opts.Owner.UID != int(st.Uid) {
			if err := syscall.Fchown(fd, opts.Owner.UID, opts.Owner.GID); err != nil {
				f.Close()
				return nil, false, fmt.Errorf("perf map %s: give it to uid %d gid %d, the process's owner: %w", path, opts.Owner.UID, opts.Owner.GID, err)
			}
		}
		return f, !exists, nil
	}
	return nil, false, fmt.Errorf("perf map %s: it kept changing while being opened; retry when nothing else writes it", path)
}

// check refuses anything but a regular file with one link, owned by euid
// or owner (if checkOwner).
func check(path string, st *syscall.Stat_t, euid int, owner *Owner, checkOwner bool) error {
	fix := fmt.Sprintf("remove it (rm %s) and run again", path)
	if kind := safefile.Kind(st.Mode); kind != "" {
		what := "it is " + kind + ", not a regular file"
		if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			target, _ := os.Readlink(path)
			what = fmt.Sprintf("it is a symbolic link (to %q), which could point anywhere", target)
			fix = fmt.Sprintf("remove the link (rm %s) and run again", path)
		}
		return &refusedError{path, what, fix}
	}
	if st.Nlink != 1 {
		return &refusedError{path, fmt.Sprintf("it has %d hard links, so writing it would change a file known by other names", st.Nlink), fix}
	}
	if !checkOwner || int(st.Uid) == euid || owner != nil && int(st.Uid) == owner.UID {
		return nil
	}
	who := fmt.Sprintf("uid %d (this user)", euid)
	if owner != nil && owner.UID != euid {
		who += fmt.Sprintf(" or uid %d (the process's owner)", owner.UID)
	}
	return &refusedError{path, fmt.Sprintf("it belongs to uid %d, not to %s", st.Uid, who),
		fmt.Sprintf("remove it (rm %s) if it is stale, or run as its owner", path)}
}

// openError explains an open that failed because the path changed into
// something refused after it was checked.
func openError(path string, err error) error {
	fix := fmt.Sprintf("remove it (rm %s) and run again", path)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return &refusedError{path, "it is a symbolic link, which could point anywhere", fix}
	case errors.Is(err, syscall.EISDIR):
		return &refusedError{path, "it is a directory, not a regular file", fix}
	case errors.Is(err, syscall.ENXIO):
		return &refusedError{path, "it is a named pipe (FIFO) or device, not a regular file", fix}
	}
	return fmt.Errorf("perf map %s: open: %w", path, err)
}

// lock takes an exclusive flock on f, polling until deadline so that a
// lock held forever (by a hostile owner, say) cannot hang the caller.
func lock(f *os.File, path string, deadline time.Time, timeout time.Duration) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return fmt.Errorf("perf map %s: lock: %w", path, err)
		case time.Now().After(deadline):
			return fmt.Errorf("perf map %s: another writer held its lock for %v; retry when it is done", path, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// samePath reports whether path still names f's inode.
func samePath(f *os.File, path string) (bool, error) {
	var st, now syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return false, fmt.Errorf("perf map %s: fstat: %w", path, err)
	}
	if err := syscall.Lstat(path, &now); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("perf map %s: %w", path, err)
	}
	return st.Dev == now.Dev && st.Ino == now.Ino, nil
}

// Path returns the map's path.
func (m *Map) Path() string { return m.path }

// Created reports whether Open created the file.
func (m *Map) Created() bool { return m.created }

// Close unlocks and closes the map.
func (m *Map) Close() error {
	if m.f == nil {
		return nil
	}
	err := m.f.Close() // releases the flock
	m.f = nil
	if err != nil {
		return fmt.Errorf("perf map %s: close: %w", m.path, err)
	}
	return nil
}

// scan calls fn for each entry now in the file.
func (m *Map) scan(fn func(Entry) error) error {
	if m.f == nil {
		return fmt.Errorf("perf map %s: closed", m.path)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(m.f.Fd()), &st); err != nil {
		return fmt.Errorf("perf map %s: fstat: %w", m.path, err)
	}
	if st.Size > MaxFileBytes {
		return fmt.Errorf("perf map %s: %w (%d bytes); remove it if it is stale", m.path, ErrTooLarge, st.Size)
	}
	s := NewScanner(io.NewSectionReader(m.f, 0, st.Size))
	for s.Scan() {
		if err := fn(s.Entry()); err != nil {
			return err
		}
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("perf map %s: %w", m.path, err)
	}
	return nil
}

// Entries returns the entries now in the file (see Parse).
func (m *Map) Entries() ([]Entry, error) {
	var out []Entry
	err := m.scan(func(e Entry) error {
		if len(out) == MaxEntries {
			return fmt.Errorf("perf map %s: %w", m.path, ErrTooManyEntries)
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

// FreeBase returns a base for size bytes of synthetic addresses disjoint
// from every entry now in the file (see the function FreeBase). As long as
// the map is open, no other locking writer can take that range.
func (m *Map) FreeBase(size uint64) (uint64, error) {
	var used []span
	err := m.scan(func(e Entry) error {
		if s, ok := window(e); ok {
			if len(used) == MaxEntries {
				return fmt.Errorf("perf map %s: %w above %#x", m.path, ErrTooManyEntries, Floor)
			}
			used = append(used, s)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	base, err := freeBase(used, size)
	if err != nil {
		return 0, fmt.Errorf("perf map %s: %w", m.path, err)
	}
	return base, nil
}

// Append appends entries (absolute addresses) as whole lines "%x %x %s\n".
// It refuses, writing nothing, an entry of size 0, a name perf would not
// keep (shorter than 3 bytes, longer than MaxLine-64, or holding a
// newline, carriage return or NUL), and entries that overlap each other
// or an entry already in the file.
//
// Each write(2) is one or more whole lines preceded by a newline. YJIT and
// ZJIT append without locking, and some versions write one line in several
// write calls; O_APPEND makes each of our writes land whole, and the
// leading newline ends any line a JIT has half written, so a line of ours
// is never glued onto it (the JIT loses that one line, which perf skips or
// reads as a symbol near address 0). perf skips the empty lines.
func (m *Map) Append(entries []Entry) error {
	if err := checkEntries(entries, 0); err != nil {
		return fmt.Errorf("perf map %s: %w", m.path, err)
	}
	sorted := sortedByStart(entries)
	err := m.scan(func(old Entry) error {
		if o, ok := overlapping(sorted, old); ok {
			return fmt.Errorf("perf map %s: entry %q overlaps %q already in the map; choose addresses with FreeBase", m.path, o.String(), old.String())
		}
		return nil
	})
	if err != nil {
		return err
	}
	return m.write(entries, 0)
}

// write appends entries moved by base.
func (m *Map) write(entries []Entry, base uint64) error {
	if m.f == nil {
		return fmt.Errorf("perf map %s: closed", m.path)
	}
	written, total := 0, 0
	buf := make([]byte, 0, writeChunk)
	flush := func() error {
		if len(buf) <= 1 {
			return nil
		}
		total += len(buf)
		n, err := m.f.Write(buf)
		written += n
		buf = buf[:0]
		if err != nil {
			return fmt.Errorf("perf map %s: append: %w (wrote %d of %d bytes)", m.path, err, written, total)
		}
		return nil
	}
	var line []byte
	for _, e := range entries {
		line = strconv.AppendUint(line[:0], e.Start+base, 16)
		line = append(line, ' ')
		line = strconv.AppendUint(line, e.Size, 16)
		line = append(line, ' ')
		line = append(line, e.Name...)
		line = append(line, '\n')
		if len(buf)+len(line) > writeChunk {
			if err := flush(); err != nil {
				return err
			}
		}
		if len(buf) == 0 {
			buf = append(buf, '\n')
		}
		buf = append(buf, line...)
	}
	return flush()
}

// CheckName says why perf would not read name back from a line of a map,
// or nil: shorter than 3 bytes (perf skips it), longer than MaxLine-64, or
// holding a newline, carriage return or NUL. Append and WriteSynthetic
// refuse such an entry; a caller with many names checks each first, to
// leave out (or rename) only the ones that fail.
func CheckName(name string) error {
	switch {
	case len(name) < minName:
		return fmt.Errorf("perf ignores names shorter than %d bytes", minName)
	case len(name) > maxName:
		return fmt.Errorf("name of %d bytes, longer than %d", len(name), maxName)
	case strings.ContainsAny(name, "\n\r\x00"):
		return errors.New("a name may not hold a newline, carriage return or NUL")
	}
	return nil
}

// checkEntries checks entries as they will be written, moved by base.
func checkEntries(entries []Entry, base uint64) error {
	for _, e := range entries {
		switch {
		case e.Size == 0:
			return fmt.Errorf("entry %q: size 0 covers no address", e.Name)
		case CheckName(e.Name) != nil:
			return fmt.Errorf("entry %.40q: %w", e.Name, CheckName(e.Name))
		case e.Start+base < e.Start || e.Start+base+e.Size < e.Start+base:
			return fmt.Errorf("entry %q: range %#x+%#x at base %#x passes 2^64", e.Name, e.Start, e.Size, base)
		}
	}
	sorted := sortedByStart(entries)
	for i := 1; i < len(sorted); i++ {
		if a, b := sorted[i-1], sorted[i]; b.Start < a.Start+a.Size {
			return fmt.Errorf("entries %q and %q overlap", a.String(), b.String())
		}
	}
	return nil
}

// sortedByStart returns a copy of entries sorted by Start.
func sortedByStart(entries []Entry) []Entry {
	s := slices.Clone(entries)
	slices.SortFunc(s, func(a, b Entry) int { return cmp.Compare(a.Start, b.Start) })
	return s
}

// overlapping returns an entry of sorted (disjoint, by Start) that shares
// an address with e; an e of size 0 counts as one byte.
func overlapping(sorted []Entry, e Entry) (Entry, bool) {
	end := e.End()
	if e.Size == 0 {
		end = e.Start + 1
	}
	// The first entry ending after e.Start, if it starts before end.
	i, _ := slices.BinarySearchFunc(sorted, e.Start, func(x Entry, t uint64) int {
		if x.End() <= t {
			return -1
		}
		return 1
	})
	if i < len(sorted) && sorted[i].Start < end {
		return sorted[i], true
	}
	return Entry{}, false
}

// WriteSynthetic appends entries to the perf map of process pid in dir
// ("" means DefaultDir), with their Start taken as offsets from a base that
// it chooses with Map.FreeBase for the span they cover, and returns the
// map's path and that base. Opening, choosing and appending happen under
// one lock, so concurrent writers get disjoint ranges. See Open for the
// safety checks and Append for the rules on entries.
//
// When the map already holds the same entries at one base, and nothing
// else in their span (an earlier call with these entries, or with more),
// it returns that base and writes nothing: the same work done again leaves
// the map as it was instead of growing it by another copy.
func WriteSynthetic(dir string, pid int, entries []Entry, opts *Options) (path string, base uint64, err error) {
	path = Path(dir, pid)
	if len(entries) == 0 {
		return path, 0, fmt.Errorf("perf map %s: no entries to write", path)
	}
	var span uint64
	for _, e := range entries {
		span = max(span, e.End())
	}
	if err := checkEntries(entries, 0); err != nil {
		return path, 0, fmt.Errorf("perf map %s: %w", path, err)
	}
	m, err := Open(dir, pid, opts)
	if err != nil {
		return path, 0, err
	}
	defer m.Close()
	if old, ok, err := m.existingBase(entries, span); err != nil || ok {
		if err == nil {
			err = m.Close()
		}
		return path, old, err
	}
	if base, err = m.FreeBase(span); err != nil {
		return path, 0, err
	}
	if err := m.write(entries, base); err != nil {
		return path, base, err
	}
	return path, base, m.Close()
}

// ReadFile parses the perf map at path (see Parse) without following a
// symbolic link or opening anything but a regular file. It does not check
// the owner: perf 6.1 does not either.
func ReadFile(path string) ([]Entry, error) {
	f, err := safefile.OpenNoFollow(path)
	if notRegular := (*safefile.NotRegularError)(nil); errors.As(err, &notRegular) {
		return nil, &refusedError{path, "it is " + notRegular.Kind + ", not a regular file", fmt.Sprintf("remove it (rm %s) if it is stale", path)}
	}
	if err != nil {
		return nil, fmt.Errorf("perf map %s: %w", path, err)
	}
	defer f.Close()
	entries, err := Parse(f)
	if err != nil {
		return entries, fmt.Errorf("perf map %s: %w", path, err)
	}
	return entries, nil
}
