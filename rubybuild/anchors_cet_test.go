package rubybuild

// anchorLayout is the part of a Layout the disassembly fallbacks check
// against, per minor version (x86_64): ec->thread_ptr and ec->cfp,
// vm->objspace (3.4: vm->gc.objspace), rb_symbols_t and rb_shape_tree_t.
func anchorLayout(version string) *Layout {
	l := &Layout{}
	l.ExecutionContext.ThreadPtr, l.ExecutionContext.CFP = 48, 16
	l.Symbols.LastID, l.Symbols.NextID, l.Symbols.IDs = 0, -1, 16
	l.Shape.TreeShapeList = -1
	switch version[:3] {
	case "3.1":
		l.VM.ObjSpace = 1104
		if version == "3.1.7" {
			l.VM.ObjSpace = 1112 // rb_vm_struct grew in 3.1.7 (rb_during_gc reads 0x458)
		}
	case "3.3":
		l.VM.ObjSpace = 1304
		l.Shape.TreeShapeList, l.Capabilities.ClassIvarsInShapes = 0, true
	case "3.4":
		l.VM.ObjSpace = 1296
		l.Shape.TreeShapeList, l.Capabilities.ClassIvarsInShapes = 0, true
	default:
		return nil
	}
	return l
}
