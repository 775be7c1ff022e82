package rubystack

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNoObject says a slot holds no object: it was freed (or its object
// moved by compaction).
var ErrNoObject = errors.New("the slot holds no object")

// ObjectClass names the class of an object from its struct RBasic, flags
// and klass, as the allocation it was seen at made it: the class's path
// (classPath), or, for an object Ruby hides from Ruby code (klass 0: an
// internal String or Array; an imemo, a node, an iclass), its type in
// parentheses, "(T_IMEMO)". A class or module whose klass is its own
// singleton class (Class.new makes one) is named Class or Module. It
// fails for a slot that holds no object (ErrNoObject: freed, or moved by
// compaction) and for flags whose type the layout does not name.
func (r *Reader) ObjectClass(flags, klass uint64) (string, error) {
	typ := flags & r.o.tMask
	name, ok := r.typeName(typ)
	switch {
	case !ok:
		return "", fmt.Errorf("%w: object type %#x", errTorn, typ)
	case name == "T_NONE" || name == "T_ZOMBIE" || name == "T_MOVED":
		return "", fmt.Errorf("%w (%s)", ErrNoObject, name)
	case klass == 0 || name == "T_IMEMO" || name == "T_NODE" || name == "T_ICLASS":
		// Hidden from Ruby code, or a klass that is no class of its own
		// (an imemo keeps a value there).
		return "(" + name + ")", nil
	}
	kf, err := r.o.flags(klass)
	if err != nil {
		return "", err
	}
	if kt := kf & r.o.tMask; kt != r.o.tClass && kt != r.o.tModule && kt != r.o.tIClass {
		return "", fmt.Errorf("%w: klass %#x of an object is of type %#x", errTorn, klass, kt)
	}
	if kf&uint64(r.Layout.Constants["RUBY_FL_SINGLETON"]) != 0 {
		switch typ {
		case r.o.tClass:
			return "Class", nil
		case r.o.tModule:
			return "Module", nil
		}
	}
	return r.classPath(klass)
}

// typeName is the name of type tag typ (RUBY_T_*) as the layout's
// constants have it, "T_STRING".
func (r *Reader) typeName(typ uint64) (string, bool) {
	if r.typeNames == nil {
		r.typeNames = map[uint64]string{}
		for k, v := range r.Layout.Constants {
			if n, ok := strings.CutPrefix(k, "RUBY_T_"); ok && k != "RUBY_T_MASK" {
				r.typeNames[uint64(v)] = "T_" + n
			}
		}
	}
	n, ok := r.typeNames[typ]
	return n, ok
}
