package testruby

import (
	"os"
	"strconv"
)

// Child says whether pid is a child of this test process: a test that
// samples every Ruby on the machine takes only those it started, while
// other tests run theirs.
func Child(pid int) bool {
	f, err := ProcStat(pid)
	return err == nil && f[1] == strconv.Itoa(os.Getpid())
}
