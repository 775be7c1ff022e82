package testruby

import (
	"os"
	"strconv"

	"github.com/rubyperf/rubyperf/internal/procstat"
)

// Child says whether pid is a child of this test process: a test that
// samples every Ruby on the machine takes only those it started, while
// other tests run theirs.
func Child(pid int) bool {
	f, err := procstat.Fields(pid)
	return err == nil && f[procstat.PPID] == strconv.Itoa(os.Getpid())
}
