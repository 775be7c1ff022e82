// Package archtest holds the test that keeps package dependencies pointing
// one way (DESIGN.md "Layout"). It has no code of its own.
package archtest
