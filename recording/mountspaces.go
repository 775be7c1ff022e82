package recording

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/native"
	"github.com/rubyperf/rubyperf/procmaps"
)

// mountSpaces finds the files processes map: a process in another mount
// namespace (a container) maps files by paths of its own, so each namespace
// has its own objects, loaded through the root of the last process seen in
// it; the recorder's own namespace loads them as they are named.
type mountSpaces struct {
	selfNS    string
	host      *mountSpace
	spaces    map[string]*mountSpace
	spaceOf   map[uint32]*mountSpace
	debuginfo *debuginfo.Finder
	refused   func(error) // told of mapped files not read, in any namespace
}

// mountSpace is the files of a mount namespace, loaded through the root of
// the last process seen in it.
type mountSpace struct {
	objs *native.Objects
	pid  uint32
}

// maxMountSpaces bounds the namespaces kept (past it they start afresh).
const maxMountSpaces = 256

// newMountSpaces loads the recorder's own namespace's files into host.
func newMountSpaces(host *native.Objects, finder *debuginfo.Finder, refused func(error)) *mountSpaces {
	m := &mountSpaces{host: &mountSpace{objs: host}, spaces: map[string]*mountSpace{}, spaceOf: map[uint32]*mountSpace{},
		debuginfo: finder, refused: refused}
	m.selfNS, _ = os.Readlink("/proc/self/ns/mnt")
	return m
}

// objectsOf is where the files pid maps are loaded from: the recorder's own
// filesystem, or the root of a process in pid's mount namespace.
func (m *mountSpaces) objectsOf(pid uint32) *native.Objects {
	if sp, ok := m.spaceOf[pid]; ok {
		sp.pid = pid
		return sp.objs
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil || ns == m.selfNS {
		m.spaceOf[pid] = m.host
		return m.host.objs
	}
	sp := m.spaces[ns]
	if sp == nil {
		if len(m.spaces) >= maxMountSpaces {
			clear(m.spaces)
			clear(m.spaceOf)
		}
		sp = &mountSpace{}
		finder, tableOnly := m.debuginfo, m.host.objs.Load.TableOnly // (loaded as the host's are)
		sp.objs = &native.Objects{Open: func(path string) *native.Object {
			root := fmt.Sprintf("/proc/%d/root", sp.pid)
			file := filepath.Join(root, path)
			if _, err := os.Stat(file); err != nil {
				file = mappedFile(sp.pid, path, file)
			}
			return native.LoadObjectWith(file, native.LoadOptions{Debuginfo: finder, Name: path, Root: root,
				TableOnly: tableOnly})
		}, Refused: m.refused}
		m.spaces[ns] = sp
	}
	sp.pid = pid
	m.spaceOf[pid] = sp
	return sp.objs
}

// forget drops what is known of pid's namespace.
func (m *mountSpaces) forget(pid uint32) { delete(m.spaceOf, pid) }

// loaded returns how many files are loaded, in every namespace: a new one
// has had its call frame information read, and maybe compiled.
func (m *mountSpaces) loaded() int {
	n := m.host.objs.Len()
	for _, sp := range m.spaces {
		n += sp.objs.Len()
	}
	return n
}

// mappedFile is the file pid maps by path, read through
// /proc/PID/map_files, or otherwise when pid maps none by that path. A
// process chrooted in a mount namespace of its own (unshare -m and chroot,
// not pivot_root) has its files named in its maps from its namespace's
// root, which its own root (/proc/PID/root) is below: its musl at
// /lib/ld-musl-x86_64.so.1 is listed as /srv/alpine/lib/ld-musl-x86_64.so.1.
func mappedFile(pid uint32, path, otherwise string) string {
	maps, err := procmaps.Read(int(pid))
	if err != nil {
		return otherwise
	}
	for _, m := range maps {
		if m.Path == path && m.Inode != 0 {
			return fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End)
		}
	}
	return otherwise
}
