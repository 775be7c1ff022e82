package recording

import (
	"os"
	"testing"
)

func TestNameFromArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"/usr/bin/ruby3.1", "app.rb", "x"}, "ruby3.1 app.rb"},
		{[]string{"ruby", "-w", "-I", "lib", "bin/rails", "server"}, "ruby rails"},
		{[]string{"ruby", "-e", "sleep"}, "ruby -e"},
		{[]string{"/r/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "--library-path", "/r/lib", "--argv0", "ruby3.3",
			"/r/usr/bin/ruby3.3", "/srv/worker.rb"}, "ruby3.3 worker.rb"},
		{[]string{"/lib64/ld-linux-x86-64.so.2"}, "ld-linux-x86-64.so.2"},
		{[]string{"puma: cluster worker 0"}, "puma: cluster worker 0"},
		{[]string{""}, "?"},
		{nil, "?"},
	} {
		if got := nameFromArgs(c.args); got != c.want {
			t.Errorf("nameFromArgs(%q) = %q, want %q", c.args, got, c.want)
		}
	}
	if got := ProcessName(os.Getpid()); got == "?" || got == "" {
		t.Errorf("ProcessName(self) = %q", got)
	}
	if got := ProcessName(1 << 30); got != "?" {
		t.Errorf("ProcessName(no such pid) = %q, want ?", got)
	}
}
