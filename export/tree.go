package export

import (
	"cmp"
	"slices"
	"strings"

	"github.com/rubyperf/rubyperf/merge"
)

// node is one frame of the call tree a flame graph draws: the stacks that
// share the path from the root to it, and their weight.
type node struct {
	name   string
	kind   merge.Kind // 0 for the root and thread frames
	file   string
	thread bool // a root frame from Root, not a frame of the stacks

	samples, time uint64 // sample count and sum of Period, this node and below
	children      []*node
	index         map[nodeKey]*node // children by key, while building
}

// nodeKey tells siblings apart: frames merge by kind, name and file, not
// by line, so that a Ruby method is one box whatever line was running.
type nodeKey struct {
	kind   merge.Kind
	name   string
	file   string
	thread bool
}

// newTree returns an empty call tree, its root named "all".
func newTree() *node { return &node{name: "all"} }

// addStack folds one stack into the tree under all.
func (all *node) addStack(s *merge.Stack, root Root) {
	n := all
	n.add(s)
	if name, ok := rootName(s, root); ok {
		n = n.child(nodeKey{name: name, thread: true})
		n.add(s)
	}
	for j := len(s.Frames) - 1; j >= 0; j-- {
		f := &s.Frames[j]
		n = n.child(nodeKey{kind: f.Kind, name: FrameName(f), file: Printable(f.File)})
		n.add(s)
	}
}

func (n *node) add(s *merge.Stack) {
	n.samples++
	n.time += s.Period
}

func (n *node) child(k nodeKey) *node {
	if c := n.index[k]; c != nil {
		return c
	}
	if n.index == nil {
		n.index = make(map[nodeKey]*node)
	}
	c := &node{name: k.name, kind: k.kind, file: k.file, thread: k.thread}
	n.index[k] = c
	n.children = append(n.children, c)
	return c
}

// finish sorts every node's children by name, as flamegraph.pl's sorted
// input does, so that the drawing does not depend on the stacks' order.
func (n *node) finish() {
	n.index = nil
	slices.SortFunc(n.children, func(a, b *node) int {
		return cmp.Or(strings.Compare(a.name, b.name), cmp.Compare(a.kind, b.kind), strings.Compare(a.file, b.file))
	})
	for _, c := range n.children {
		c.finish()
	}
}

// weight is what n counts for under w.
func (n *node) weight(w Weight) uint64 {
	if w == WeightSamples {
		return n.samples
	}
	return n.time
}
