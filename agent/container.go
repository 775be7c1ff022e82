package agent

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// maxCgroupBytes bounds /proc/PID/cgroup as read (a line per hierarchy).
const maxCgroupBytes = 64 << 10

// ContainerID is the id of the container process pid runs in, from its
// cgroups, or "" when it is in none that names one.
func ContainerID(pid int) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	defer f.Close()
	return ParseContainerID(io.LimitReader(f, maxCgroupBytes))
}

// ParseContainerID finds a container id in a /proc/PID/cgroup: the last
// 64-hex-digit id in a cgroup path, as container runtimes name the cgroups
// of their containers:
//
//	0::/system.slice/docker-<id>.scope                              (Docker, systemd)
//	0::/kubepods.slice/.../cri-containerd-<id>.scope                (Kubernetes, containerd)
//	12:cpu,cpuacct:/kubepods/burstable/pod<uid>/<id>                (cgroup v1)
//	0::/machine.slice/libpod-<id>.scope/container                   (Podman)
func ParseContainerID(r io.Reader) string {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxCgroupBytes)
	id := ""
	for sc.Scan() {
		line := sc.Text()
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, elem := range strings.Split(parts[2], "/") {
			if c := containerIn(elem); c != "" {
				id = c
			}
		}
	}
	return id
}

// containerIn is the 64-hex-digit id in one cgroup path element
// ("docker-<id>.scope", "cri-containerd-<id>.scope", "<id>"), or "".
func containerIn(elem string) string {
	elem = strings.TrimSuffix(elem, ".scope")
	if i := strings.LastIndexAny(elem, "-:"); i >= 0 {
		elem = elem[i+1:]
	}
	if len(elem) != 64 {
		return ""
	}
	for i := 0; i < len(elem); i++ {
		c := elem[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return ""
		}
	}
	return elem
}
