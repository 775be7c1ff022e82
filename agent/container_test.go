package agent

import (
	"strings"
	"testing"
)

func TestParseContainerID(t *testing.T) {
	id := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct{ name, cgroup, want string }{
		{"host, cgroup v2", "0::/user.slice/user-0.slice/session-1.scope\n", ""},
		{"docker, systemd driver", "0::/system.slice/docker-" + id + ".scope\n", id},
		{"docker, cgroupfs v1", "12:pids:/docker/" + id + "\n11:memory:/docker/" + id + "\n", id},
		{"kubernetes containerd", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice/cri-containerd-" + id + ".scope\n", id},
		{"kubernetes cgroup v1", "4:cpu,cpuacct:/kubepods/burstable/pod8f1c/" + id + "\n", id},
		{"cri-o", "0::/kubepods.slice/crio-" + id + ".scope\n", id},
		{"podman", "0::/machine.slice/libpod-" + id + ".scope/container\n", id},
		{"32 hex digits is not a container", "4:memory:/process_api/f02a1f4958415b4adf71334c974920db\n", ""},
		{"upper case is not an id", "0::/docker/" + strings.ToUpper(id) + "\n", ""},
		{"garbage", "not a cgroup file", ""},
		{"empty", "", ""},
	} {
		if got := ParseContainerID(strings.NewReader(c.cgroup)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// FuzzParseContainerID: any bytes give an id of 64 hex digits or nothing.
func FuzzParseContainerID(f *testing.F) {
	f.Add("0::/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n")
	f.Add("12:pids:/docker/x\n0::/\n")
	f.Fuzz(func(t *testing.T, s string) {
		id := ParseContainerID(strings.NewReader(s))
		if id != "" && (len(id) != 64 || strings.Trim(id, "0123456789abcdef") != "") {
			t.Fatalf("id %q", id)
		}
	})
}
