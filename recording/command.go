package recording

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxCommandTree bounds how many processes of a command's tree are ended.
const maxCommandTree = 4096

// abandonCommand ends a command started for a recording that then failed
// to start, with every process it started, and reaps it (done is its
// wait's result): nothing started by record outlives a failed start.
func abandonCommand(pid int, done <-chan error) {
	killTree(pid)
	<-done
}

// killTree stops pid and, as they are found, its descendants (a stopped
// process forks no more), then kills them all. A fork under way while its
// parent is stopped can escape one round; a few rounds catch it.
func killTree(pid int) {
	for range 3 {
		tree := []int{pid}
		unix.Kill(pid, unix.SIGSTOP)
		for i := 0; i < len(tree) && len(tree) < maxCommandTree; i++ {
			for _, c := range children(tree[i]) {
				unix.Kill(c, unix.SIGSTOP)
				tree = append(tree, c)
			}
		}
		for _, p := range tree {
			unix.Kill(p, unix.SIGKILL)
		}
		if len(tree) == 1 {
			return
		}
	}
}

// children lists the children of every thread of pid
// (/proc/PID/task/TID/children), bounded.
func children(pid int) []int {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil
	}
	var out []int
	for i, t := range tasks {
		if i == maxCommandTree {
			break
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil && c > 1 && len(out) < maxCommandTree {
				out = append(out, c)
			}
		}
	}
	return out
}
