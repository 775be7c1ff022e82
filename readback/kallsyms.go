package readback

import (
	"fmt"

	"github.com/rubyperf/rubyperf/internal/bounded"
	"github.com/rubyperf/rubyperf/native"
)

// maxKallsymsRatio bounds the kallsyms text a byte of the FeatureKallsyms
// section stands for. /proc/kallsyms compresses about 5:1 (6.4:1 at gzip's
// best): every line has its own address and name. A section that says
// more is not the kernel's.
const maxKallsymsRatio = 64

// MaxKallsyms bounds /proc/kallsyms as read, by the recorder and from a
// recording (it is ~10 MiB on a big kernel).
const MaxKallsyms = 64 << 20

// decodeKallsyms reads a FeatureKallsyms section: at most maxKallsymsRatio
// times its own size of text, and MaxKallsyms.
func decodeKallsyms(b []byte) (*native.Kernel, error) {
	limit := min(int64(len(b))*maxKallsymsRatio+64<<10, MaxKallsyms)
	text, err := bounded.Gunzip(b, limit)
	if err != nil {
		return nil, fmt.Errorf("kernel symbol table: %w", err)
	}
	k, err := native.ParseKallsyms(text)
	if err != nil {
		if text.Over() {
			err = fmt.Errorf("over %d bytes decompressed from %d compressed (kallsyms compresses under %d:1)",
				limit, len(b), maxKallsymsRatio)
		}
		return nil, fmt.Errorf("kernel symbol table: %w", err)
	}
	return k, nil
}
