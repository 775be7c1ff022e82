package rubystack

import (
	"encoding/binary"
	"fmt"
)

// Bounds on class-path resolution.
const (
	maxClassDepth = 8       // nested anonymous-class names, superclass hops per step
	maxIvars      = 1 << 12 // entries of a class's ivar table scanned
)

// classPath returns rb_class_path(klass), except that where Ruby would print
// an address it prints a stable name, so profiles from many processes
// aggregate:
//
//	anonymous class         #<anonymous subclass of Foo>
//	anonymous module        #<anonymous module>
//	refinement              #<refinement Foo of Bar>
func (r *Reader) classPath(klass uint64) (string, error) {
	return r.classPathDepth(klass, 0)
}

func (r *Reader) classPathDepth(klass uint64, depth int) (string, error) {
	if depth > maxClassDepth {
		return "", fmt.Errorf("%w: class names nest deeper than %d", errTorn, maxClassDepth)
	}
	f, err := r.o.flags(klass)
	if err != nil {
		return "", err
	}
	if c, ok := r.classes[klass]; ok && c.flags == f {
		return c.path, nil
	}
	path, err := r.namedPath(klass)
	if err != nil {
		return "", err
	}
	if path == "" {
		if path, err = r.anonymousName(klass, f, depth); err != nil {
			return "", err
		}
	}
	r.remember(r.classes, klass, classEntry{flags: f, path: path})
	return path, nil
}

type classEntry struct {
	flags uint64
	path  string
}

// namedPath returns the class's permanent or temporary path, or "" if it has
// none (anonymous).
func (r *Reader) namedPath(klass uint64) (string, error) {
	if r.Layout.Capabilities.ClassPathField {
		ext, err := r.classext(klass)
		if err != nil {
			return "", err
		}
		v, err := r.o.word(ext + uint64(r.Layout.Class.ClassPath))
		if err != nil || v == 0 {
			return "", err
		}
		return r.o.str(v)
	}
	for _, name := range []string{"__classpath__", "__tmp_classpath__"} {
		v, ok, err := r.ivar(klass, name)
		if err != nil {
			return "", err
		}
		if ok {
			return r.o.str(v)
		}
	}
	return "", nil
}

// classext returns the address of a class's rb_classext_struct.
func (r *Reader) classext(klass uint64) (uint64, error) {
	if r.Layout.Capabilities.ClassextEmbedded {
		return klass + uint64(r.Layout.Class.Size), nil
	}
	return r.o.word(klass + uint64(r.Layout.Class.Ptr))
}

// ivar reads a class's instance variable: from its st_table (≤3.1, where
// classes keep ivars in RCLASS_IV_TBL) or through its shape (3.2+).
func (r *Reader) ivar(klass uint64, name string) (uint64, bool, error) {
	if r.Layout.Capabilities.ClassIvarsInShapes {
		return r.shapeIvar(klass, name)
	}
	if r.Layout.Class.ClassextIvTbl < 0 {
		return 0, false, nil
	}
	ext, err := r.classext(klass)
	if err != nil || ext == 0 {
		return 0, false, err
	}
	tbl, err := r.o.word(ext + uint64(r.Layout.Class.ClassextIvTbl))
	if err != nil || tbl == 0 {
		return 0, false, err
	}
	st := &r.Layout.StTable
	start, err := r.o.word(tbl + uint64(st.EntriesStart))
	if err != nil {
		return 0, false, err
	}
	bound, err := r.o.word(tbl + uint64(st.EntriesBound))
	if err != nil {
		return 0, false, err
	}
	entries, err := r.o.word(tbl + uint64(st.Entries))
	if err != nil {
		return 0, false, err
	}
	if bound < start || bound-start > maxIvars {
		return 0, false, fmt.Errorf("%w: ivar table of %#x has %d entries", errTorn, klass, bound-start)
	}
	n := bound - start
	buf := make([]byte, n*uint64(st.EntrySize))
	if err := r.mem.ReadAt(buf, entries+start*uint64(st.EntrySize)); err != nil {
		return 0, false, err
	}
	const deleted = ^uint64(0) // RESERVED_HASH_VAL marks a deleted entry
	for i := uint64(0); i < n; i++ {
		e := buf[i*uint64(st.EntrySize):]
		if le64(e) == deleted { // hash at offset 0
			continue
		}
		key := le64(e[st.EntryKey:])
		if s, err := r.syms.name(key); err == nil && s == name {
			return le64(e[st.EntryRecord:]), true, nil
		}
	}
	return 0, false, nil
}

// maxShapeDepth bounds the walk from a shape to the root: one step per ivar.
const maxShapeDepth = 1 << 12

// shapeIvar finds an ivar of a class or module through its shape, as
// rb_shape_get_iv_index does: the shape id is in the high bits of the flags
// (as wide as shape_id_t) of the class (3.2-3.4) or of its fields object
// (4.0+, where the id also carries flag bits), each IVAR shape on the way to
// the root names one ivar, and its next_iv_index - 1 is the ivar's index in
// the ivar array (classext.iv_ptr, or the fields object's own slots).
func (r *Reader) shapeIvar(klass uint64, name string) (uint64, bool, error) {
	s := &r.Layout.Shape
	caps := &r.Layout.Capabilities
	c := r.Layout.Constants
	list, err := r.shapeList()
	if err != nil || list == 0 {
		return 0, false, err
	}
	ext, err := r.classext(klass)
	if err != nil || ext == 0 {
		return 0, false, err
	}
	holder := klass // the object whose flags carry the shape id
	if caps.ClassFieldsObject {
		if holder, err = r.o.word(ext + uint64(r.Layout.Class.FieldsObj)); err != nil || holder == 0 {
			return 0, false, err // no ivars yet
		}
	}
	f, err := r.o.flags(holder)
	if err != nil {
		return 0, false, err
	}
	bits := uint64(8 * s.ParentIDSize)
	if bits == 0 || bits > 32 {
		return 0, false, fmt.Errorf("%w: shape ids of %d bits", errTorn, bits)
	}
	id := (f >> (64 - bits)) & (1<<bits - 1)
	if tc, ok := c["SHAPE_ID_FL_TOO_COMPLEX"]; ok && id&uint64(tc) != 0 {
		return 0, false, nil // ivars in a hash table: not read
	}
	flagBits := uint64(c["SHAPE_ID_FLAGS_MASK"]) // 0 where shape ids carry no flags
	buf := make([]byte, s.Size)
	for i := 0; i < maxShapeDepth; i++ {
		if err := r.mem.ReadAt(buf, list+(id&^flagBits)*uint64(s.Size)); err != nil {
			return 0, false, err
		}
		typ := int64(buf[s.Type])
		if typ == c["SHAPE_ROOT"] {
			return 0, false, nil
		}
		if tc, ok := c["SHAPE_OBJ_TOO_COMPLEX"]; ok && typ == tc {
			return 0, false, nil // ivars in a hash table: not read
		}
		if typ == c["SHAPE_IVAR"] {
			edge := le64(buf[s.EdgeName:])
			if n, err := r.syms.name(edge); err == nil && n == name {
				next := uint64(binary.LittleEndian.Uint16(buf[s.NextIvIndex:]))
				if s.NextIvIndexSize == 4 {
					next = uint64(binary.LittleEndian.Uint32(buf[s.NextIvIndex:]))
				}
				if next == 0 {
					return 0, false, fmt.Errorf("%w: ivar shape with no index", errTorn)
				}
				slots, err := r.ivarSlots(ext, holder, f)
				if err != nil || slots == 0 {
					return 0, false, err
				}
				v, err := r.o.word(slots + 8*(next-1))
				return v, err == nil, err
			}
		}
		id = uint64(binary.LittleEndian.Uint32(buf[s.ParentID:]))
	}
	return 0, false, fmt.Errorf("%w: shape chain longer than %d", errTorn, maxShapeDepth)
}

// shapeList returns the address of the first shape: rb_vm_t.shape_list
// (3.2), or rb_shape_tree_t.shape_list of the tree that rb_shape_tree_ptr
// points to (3.3, 3.4) or that is the global rb_shape_tree itself (4.0+).
func (r *Reader) shapeList() (uint64, error) {
	s := &r.Layout.Shape
	if r.Layout.Capabilities.ShapeListInVM {
		if r.vmPtr == 0 {
			return 0, nil
		}
		vm, err := r.o.word(r.vmPtr)
		if err != nil || vm == 0 {
			return 0, err
		}
		return r.o.word(vm + uint64(s.VMShapeList))
	}
	if r.shapes == 0 {
		return 0, nil
	}
	tree := r.shapes
	if !r.shapesStruct {
		var err error
		if tree, err = r.o.word(r.shapes); err != nil || tree == 0 {
			return 0, err
		}
	}
	return r.o.word(tree + uint64(s.TreeShapeList))
}

// ivarSlots returns the address of a class's ivar array: classext.iv_ptr, or
// the slots of its fields object (inline, or behind a pointer when it has
// ROBJECT_HEAP among the flags fieldsFlags).
func (r *Reader) ivarSlots(ext, fields, fieldsFlags uint64) (uint64, error) {
	if !r.Layout.Capabilities.ClassFieldsObject {
		return r.o.word(ext + uint64(r.Layout.Shape.ClassextIvPtr))
	}
	if fieldsFlags&uint64(r.Layout.Constants["ROBJECT_HEAP"]) != 0 {
		return r.o.word(fields + uint64(r.Layout.Fields.Heap))
	}
	return fields + uint64(r.Layout.Fields.Embed), nil
}

// anonymousName names a class or module that has no path.
func (r *Reader) anonymousName(klass, flags uint64, depth int) (string, error) {
	typ := flags & r.o.tMask
	if typ == r.o.tModule {
		if refinement, ok := r.Layout.Constants["RMODULE_IS_REFINEMENT"]; ok && flags&uint64(refinement) != 0 {
			return r.refinementName(klass, depth)
		}
		return "#<anonymous module>", nil
	}
	sup, err := r.realSuper(klass)
	if err != nil {
		return "", err
	}
	if sup == 0 {
		return "#<anonymous class>", nil
	}
	sp, err := r.classPathDepth(sup, depth+1)
	if err != nil {
		return "", err
	}
	return "#<anonymous subclass of " + sp + ">", nil
}

// refinementName: Module#refine keeps the refined class in RCLASS_SUPER and
// the refining module in the ivar __defined_at__.
func (r *Reader) refinementName(klass uint64, depth int) (string, error) {
	refined, err := r.super(klass)
	if err != nil {
		return "", err
	}
	rp, err := r.classPathDepth(refined, depth+1)
	if err != nil {
		return "", err
	}
	at, ok, err := r.ivar(klass, "__defined_at__")
	if err != nil || !ok {
		return "#<refinement " + rp + ">", err
	}
	ap, err := r.classPathDepth(at, depth+1)
	if err != nil {
		return "", err
	}
	return "#<refinement " + rp + " of " + ap + ">", nil
}

// realSuper is the superclass, skipping included modules (T_ICLASS).
func (r *Reader) realSuper(klass uint64) (uint64, error) {
	c := klass
	for i := 0; i < maxClassDepth*8; i++ {
		s, err := r.super(c)
		if err != nil || s == 0 {
			return 0, err
		}
		t, err := r.o.typeOf(s)
		if err != nil {
			return 0, err
		}
		if t != r.o.tIClass {
			return s, nil
		}
		c = s
	}
	return 0, fmt.Errorf("%w: superclass chain of %#x too long", errTorn, klass)
}

// super is RCLASS_SUPER: the superclass (or, for a refinement, the refined
// class; for an ICLASS, the next in the ancestry), or 0.
func (r *Reader) super(klass uint64) (uint64, error) {
	if r.Layout.Capabilities.SuperInClassext {
		ext, err := r.classext(klass)
		if err != nil {
			return 0, err
		}
		return r.o.word(ext + uint64(r.Layout.Class.ClassextSuper))
	}
	return r.o.word(klass + uint64(r.Layout.Class.Super))
}

// classOf is rb_obj_class: the object's class, past singletons and ICLASSes.
func (r *Reader) classOf(obj uint64) (uint64, error) {
	k, err := r.o.word(obj + uint64(r.Layout.Basic.Klass))
	if err != nil {
		return 0, err
	}
	c, err := r.classOfKlass(k)
	if err != nil {
		return 0, fmt.Errorf("object %#x: %w", obj, err)
	}
	return c, nil
}

// classOfKlass is the class of an object whose klass is k: k, or the
// first of its superclasses that is neither a singleton class nor an
// ICLASS.
func (r *Reader) classOfKlass(klass uint64) (uint64, error) {
	k := klass
	singleton := uint64(r.Layout.Constants["RUBY_FL_SINGLETON"])
	for i := 0; i < maxClassDepth*8 && k != 0; i++ {
		f, err := r.o.flags(k)
		if err != nil {
			return 0, err
		}
		if f&singleton == 0 && f&r.o.tMask != r.o.tIClass {
			return k, nil
		}
		if k, err = r.super(k); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%w: no class for klass %#x", errTorn, klass)
}

// methodOwner resolves a method entry's defined_class the way
// rb_profile_frame_classpath and _singleton_method_p do: the path of the
// class, and whether the method is a singleton method ("Foo.bar").
func (r *Reader) methodOwner(klass uint64) (path string, singleton bool, err error) {
	if klass == 0 || r.o.special(klass) {
		return "", false, nil
	}
	f, err := r.o.flags(klass)
	if err != nil {
		return "", false, err
	}
	switch {
	case f&r.o.tMask == r.o.tIClass:
		if klass, err = r.o.word(klass + uint64(r.Layout.Basic.Klass)); err != nil {
			return "", false, err
		}
	case f&r.o.tMask == r.o.tClass && f&uint64(r.Layout.Constants["RUBY_FL_SINGLETON"]) != 0:
		// RCLASS_SINGLETON_P: only a class is a singleton class (from 3.4
		// the bit is shared with a module's RMODULE_IS_REFINEMENT).
		singleton = true
		attached, err := r.attached(klass)
		if err != nil {
			return "", true, err
		}
		t, err := r.o.typeOf(attached)
		if err != nil {
			return "", true, err
		}
		if t != r.o.tClass && t != r.o.tModule {
			c, err := r.classOf(attached)
			if err != nil {
				return "", true, err
			}
			cp, err := r.classPath(c)
			return "#<instance of " + cp + ">", true, err
		}
		klass = attached
	}
	path, err = r.classPath(klass)
	return path, singleton, err
}

// attached is the object a singleton class belongs to.
func (r *Reader) attached(klass uint64) (uint64, error) {
	if r.Layout.Class.AttachedObject >= 0 {
		ext, err := r.classext(klass)
		if err != nil {
			return 0, err
		}
		return r.o.word(ext + uint64(r.Layout.Class.AttachedObject))
	}
	v, ok, err := r.ivar(klass, "__attached__")
	if err == nil && !ok {
		err = fmt.Errorf("%w: singleton class %#x has no __attached__", errTorn, klass)
	}
	return v, err
}
