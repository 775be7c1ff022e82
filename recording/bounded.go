package recording

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
)

// cappedReader reads a recording's decompressed section, failing once
// more than max bytes come out, and, with held set, once the reader it
// feeds holds more than maxHeld bytes it has not taken yet (a json.Decoder
// reads a value whole before decoding it).
type cappedReader struct {
	r       io.Reader
	n, max  int64
	held    func() int64 // bytes the reader has taken so far
	maxHeld int64
}

// gunzipCapped reads the gzip data b through a cappedReader of max bytes.
func gunzipCapped(b []byte, max int64) (*cappedReader, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return &cappedReader{r: zr, max: max}, nil
}

func (c *cappedReader) Read(p []byte) (int, error) {
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
