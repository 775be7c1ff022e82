package rubybuild

import "testing"

// TestAgeBits: the built-in tables up to 3.2 hold ages in two flag bits
// (RUBY_FL_PROMOTED0 and 1, from bit 5); from 3.3 the flags hold one bit.
func TestAgeBits(t *testing.T) {
	for _, c := range []struct {
		version string
		ok      bool
	}{{"3.1.2", true}, {"3.2.0", true}, {"3.3.0", false}, {"3.4.0", false}} {
		l, err := BuiltinLayout(c.version, "x86_64")
		if err != nil {
			t.Fatal(err)
		}
		mask, shift, ok := l.AgeBits()
		if ok != c.ok || ok && (mask != 3<<5 || shift != 5) {
			t.Errorf("%s: AgeBits() = %#x, %d, %v; want ok %v (mask 0x60, shift 5)", c.version, mask, shift, ok, c.ok)
		}
	}
}
