package rubybuild

import (
	"os"
	"strings"
	"sync"
	"syscall"
)

// Cache keeps what was worked out of a build (its Layout and Anchors) for
// the Binaries opened after it with the same Cache: a recorder attaching to
// many processes of one Ruby reads its DWARF, or disassembles its code, once.
// An entry is found by the identity of the files it was worked out of (the
// binary and its debug file: device, inode, size, modification and change
// times), never by name or build-id alone: a stripped file and its unstripped
// original share a build-id, not a layout's source. Safe for concurrent use;
// it holds at most maxCached builds, forgetting all of them past that.
type Cache struct {
	mu     sync.Mutex
	builds map[buildKey]*cachedBuild
}

// maxCached bounds the builds a Cache keeps.
const maxCached = 256

// fileID identifies a file's content as stat sees it.
type fileID struct {
	dev, ino, size   uint64
	mtimeNs, ctimeNs int64
	ok               bool
}

type buildKey struct{ binary, debug fileID }

// cachedBuild is what a Binary found, and the paths its Layout's Source
// names (the binary and debug file as first opened). Only a Layout found is
// kept: a refusal names the path it was asked for, and is rare.
type cachedBuild struct {
	elfPath, debugPath string
	layout             *Layout
	anchors            *Anchors // nil until found; under the Cache's lock
	refill             *Refill  // nil until found; under the Cache's lock
}

func identify(f *os.File) fileID {
	st, err := f.Stat()
	if err != nil {
		return fileID{}
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	return fileID{dev: sys.Dev, ino: sys.Ino, size: uint64(sys.Size),
		mtimeNs: sys.Mtim.Nano(), ctimeNs: sys.Ctim.Nano(), ok: true}
}

// key is b's files' identity in its Cache; ok is false when it has none,
// or a file could not be stat'ed.
func (b *Binary) key() (buildKey, bool) {
	if b.cache == nil {
		return buildKey{}, false
	}
	k := buildKey{binary: identify(b.elf.osf)}
	if b.debug != nil {
		k.debug = identify(b.debug.osf)
		if !k.debug.ok {
			return k, false
		}
	}
	return k, k.binary.ok
}

// get is what c knows of the build at k, or nil.
func (c *Cache) get(k buildKey) *cachedBuild {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.builds[k]
}

// put records what was found of the build at k.
func (c *Cache) put(k buildKey, cb *cachedBuild) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.builds == nil || len(c.builds) >= maxCached {
		c.builds = map[buildKey]*cachedBuild{}
	}
	c.builds[k] = cb
}

// forBinary is the cached layout as b names it: its Source says the file
// it was read from by b's path for it, not by another process's alias of
// the same file.
func (cb *cachedBuild) forBinary(b *Binary) *Layout {
	if cb.layout == nil {
		return nil
	}
	l := *cb.layout
	for _, p := range []struct{ was, is string }{{cb.elfPath, b.elf.path}, {cb.debugPath, b.DebugFile}} {
		if p.was != "" && l.Source == "dwarf:"+p.was {
			l.Source = "dwarf:" + p.is
		}
	}
	return &l
}

// anchors are the anchors found with cb's layout, or nil.
func (c *Cache) anchors(cb *cachedBuild) *Anchors {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cb.anchors
}

// putAnchors records the anchors found with cb's layout.
func (c *Cache) putAnchors(cb *cachedBuild, a Anchors) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cb.anchors = &a
}

// refill is the refill sites found with cb's layout, or nil.
func (c *Cache) refill(cb *cachedBuild) *Refill {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cb.refill
}

// putRefill records the refill sites found with cb's layout.
func (c *Cache) putRefill(cb *cachedBuild, r *Refill) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cb.refill = r
}

// renamed is a with the layout source from in each anchor's How and Why
// replaced by to.
func (a Anchors) renamed(from, to string) Anchors {
	if from == to {
		return a
	}
	for _, x := range a.List() {
		x.How = strings.ReplaceAll(x.How, from, to)
		x.Why = strings.ReplaceAll(x.Why, from, to)
	}
	return a
}
