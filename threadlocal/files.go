package threadlocal

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// Files remembers what Find read of ELF files, by the identity of each file
// (device, inode, size, modification and change times) and the symbol
// looked for: a recorder that looks in many processes mapping the same
// libraries reads each library's dynamic symbols once. Safe for concurrent
// use; it holds at most maxFiles entries, forgetting all of them past that.
// The zero value is ready; a nil *Files remembers nothing.
type Files struct {
	mu    sync.Mutex
	infos map[fileKey]*elfInfo
}

// maxFiles bounds the entries a Files keeps.
const maxFiles = 1 << 12

type fileKey struct {
	dev, ino, size   uint64
	mtimeNs, ctimeNs int64
	symbol           string
}

// errNotELF says a file remembered was not an ELF object Find can use.
var errNotELF = errors.New("not a usable ELF object")

// Find is the package's Find, remembering what it reads of files.
func (c *Files) Find(pid int, mem Memory, symbol string) (*Var, error) {
	return find(pid, mem, symbol, c)
}

func keyOf(st os.FileInfo, symbol string) (fileKey, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{dev: sys.Dev, ino: sys.Ino, size: uint64(sys.Size), mtimeNs: sys.Mtim.Nano(),
		ctimeNs: sys.Ctim.Nano(), symbol: symbol}, true
}

// get is what was read of the file at k: its info, or nil for a file that
// was not ELF, and whether it was read at all.
func (c *Files) get(k fileKey) (*elfInfo, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	info, ok := c.infos[k]
	return info, ok
}

func (c *Files) keep(k fileKey, info *elfInfo) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.infos == nil || len(c.infos) >= maxFiles {
		c.infos = map[fileKey]*elfInfo{}
	}
	c.infos[k] = info
}
