// Package archtest holds the tests that keep package dependencies pointing
// one way (DESIGN.md "Layout"), and that keep what reads a recording from
// linking what loads the BPF program. It has no code of its own.
package archtest
