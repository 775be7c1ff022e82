// Package bounded reads a recording's compressed sections within bounds: a
// section any perf.data a user opens may hold is decompressed no further
// than its reader allows, so a gzip bomb costs an error, not the memory it
// stands for. It knows no section's format.
package bounded

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
)

// Reader reads a recording's decompressed section, failing once more than
// max bytes come out, and, once HoldAtMost is called, once the reader it
// feeds holds more bytes than it allows that it has not taken yet (a
// json.Decoder reads a value whole before decoding it).
type Reader struct {
	r       io.Reader
	n, max  int64
	held    func() int64 // bytes the reader has taken so far
	maxHeld int64
}

// Gunzip reads the gzip data b through a Reader of max bytes.
func Gunzip(b []byte, max int64) (*Reader, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return &Reader{r: zr, max: max}, nil
}

// HoldAtMost makes reading fail once more than max bytes read have not
// been taken by the reader fed, which says through taken how many it has.
func (c *Reader) HoldAtMost(taken func() int64, max int64) {
	c.held, c.maxHeld = taken, max
}

// Over says whether more than the Reader's max bytes came out (reading
// failed then).
func (c *Reader) Over() bool { return c.n > c.max }

func (c *Reader) Read(p []byte) (int, error) {
	if c.n > c.max {
		return 0, fmt.Errorf("over %d bytes decompressed", c.max)
	}
	if c.held != nil && c.n-c.held() > c.maxHeld {
		return 0, fmt.Errorf("an entry over %d bytes", c.maxHeld)
	}
	if rest := c.max + 1 - c.n; int64(len(p)) > rest {
		p = p[:rest] // one byte past max says there is more
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
