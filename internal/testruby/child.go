package testruby

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Child says whether pid is a child of this test process: a test that
// samples every Ruby on the machine takes only those it started, while
// other tests run theirs.
func Child(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ppid ...: the command name may hold spaces and ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	return len(f) >= 2 && f[1] == strconv.Itoa(os.Getpid())
}
