package native

import (
	"os"
	"testing"

	"github.com/go-delve/delve/pkg/dwarf/frame"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// tableObjects are real objects to compile: the system's libc and Ruby, and
// the test Rubies' libruby or static ruby.
func tableObjects(t *testing.T) []string {
	var paths []string
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1",
		"/usr/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"} {
		if _, err := os.Stat(p); err == nil {
			paths = append(paths, p)
		}
	}
	for _, r := range testruby.All(t) {
		paths = append(paths, r.VM)
	}
	return paths
}

// TestTableMatchesCFI compiles real objects and checks every row against
// the rule delve's interpreter of the same call frame information finds, at
// each row's first and last address: the table may say less than the CFI
// (CFAUnsupported) but never something else.
func TestTableMatchesCFI(t *testing.T) {
	for _, path := range tableObjects(t) {
		t.Run(path, func(t *testing.T) {
			o := LoadObject(path)
			if o.Err() != nil {
				t.Fatalf("%s: %v", path, o.Err())
			}
			tab, err := o.Table(ArchX86_64)
			if err != nil {
				t.Fatal(err)
			}
			checked, mismatched := 0, 0
			for i, r := range tab.Rows {
				if r.CFA == CFANone || i+1 >= len(tab.Rows) {
					continue
				}
				for _, addr := range []uint64{r.Start, tab.Rows[i+1].Start - 1, r.Start + (tab.Rows[i+1].Start-r.Start)/2} {
					fde := o.fde(addr)
					if fde == nil {
						t.Errorf("%#x: the table has a rule (%v) where no FDE is", addr, r)
						mismatched++
						continue
					}
					ctx, err := fde.EstablishFrame(addr)
					if err != nil {
						continue
					}
					checked++
					if r.CFA == CFASignal {
						if !o.signalFrame(addr) {
							mismatched++
							t.Errorf("%#x: a signal frame's row where the CIE says none", addr)
						}
						continue
					}
					if why := compareRow(r, ctx, addr); why != "" {
						mismatched++
						if mismatched <= 10 {
							t.Errorf("%#x: table %v, CFI: %s", addr, r, why)
						}
					}
				}
			}
			t.Logf("%s: %d rows (%d bytes of Row), %d code bytes, %.3f%% unsupported; %d addresses checked, %d differ",
				path, len(tab.Rows), len(tab.Rows)*24, tab.Bytes, 100*float64(tab.Unsupported)/float64(max(tab.Bytes, 1)), checked, mismatched)
			if checked < len(tab.Rows) {
				t.Errorf("only %d addresses checked for %d rows", checked, len(tab.Rows))
			}
		})
	}
}

// compareRow says how r differs from delve's rule at addr, or "".
func compareRow(r Row, ctx *frame.FrameContext, addr uint64) string {
	if ra, ok := ctx.Regs[dwarfRA]; ok && ra.Rule == frame.RuleUndefined {
		if r.CFA != CFAOutermost {
			return "the return address is undefined (outermost frame)"
		}
		return ""
	}
	if r.CFA == CFAUnsupported {
		// The table may decline only a rule that is not one it models: a
		// CFA from another register (ld.so's _dl_runtime_resolve realigns
		// the stack through rbx), an expression other than the PLT's, or
		// none at all.
		if ctx.CFA.Rule == frame.RuleCFA && (ctx.CFA.Reg == dwarfRSP || ctx.CFA.Reg == dwarfRBP) {
			if ra, ok := ctx.Regs[dwarfRA]; ok && ra.Rule == frame.RuleOffset {
				return "declined a register rule it models"
			}
		}
		if ctx.CFA.Rule == frame.RuleExpression {
			if _, _, ok := pltExpression(ctx.CFA.Expression); ok {
				return "declined the PLT's expression"
			}
		}
		return ""
	}
	switch ctx.CFA.Rule {
	case frame.RuleCFA:
		switch {
		case ctx.CFA.Reg == dwarfRSP && r.CFA == CFAStackPointer, ctx.CFA.Reg == dwarfRBP && r.CFA == CFAFramePointer:
			if int64(r.CFAOffset) != ctx.CFA.Offset {
				return "cfa offset " + itoa(ctx.CFA.Offset)
			}
		default:
			return "cfa register " + itoa(int64(ctx.CFA.Reg))
		}
	case frame.RuleExpression:
		if r.CFA != CFAPLT {
			return "cfa expression"
		}
		// The expression, evaluated at both halves of a PLT entry, gives
		// what the row computes.
		for _, low := range []uint64{0, 15} {
			var regs [dwarfMax]uint64
			var known [dwarfMax]bool
			regs[dwarfRSP], known[dwarfRSP] = 0x7ff000, true
			regs[dwarfRA], known[dwarfRA] = addr&^15|low, true
			want, err := evalCFAExpression(ctx.CFA.Expression, &regs, &known)
			if err != nil {
				return "cfa expression: " + err.Error()
			}
			got := regs[dwarfRSP] + uint64(int64(r.CFAOffset))
			if low >= uint64(r.PLTThreshold) {
				got += 8
			}
			if got != want {
				return "plt cfa " + itoa(int64(want-regs[dwarfRSP]))
			}
		}
	default:
		return "cfa rule " + itoa(int64(ctx.CFA.Rule))
	}
	if why := compareReg("fp", r.FP, ctx.Regs, dwarfRBP); why != "" {
		return why
	}
	return compareReg("ra", r.RA, ctx.Regs, dwarfRA)
}

func compareReg(name string, got RegRule, regs map[uint64]frame.DWRule, reg uint64) string {
	want := RegRule{Kind: RegUnknown}
	if rule, ok := regs[reg]; !ok {
		want = RegRule{Kind: RegSame}
	} else {
		switch rule.Rule {
		case frame.RuleOffset:
			want = RegRule{Kind: RegAtCFA, Offset: int32(rule.Offset)}
		case frame.RuleSameVal:
			want = RegRule{Kind: RegSame}
		case frame.RuleUndefined:
			// delve's DW_CFA_restore of a register the CIE has no rule
			// for; the psABI's default for a callee-saved one is its
			// same value (as Unwind reads it).
			if reg != dwarfRA {
				want = RegRule{Kind: RegSame}
			}
		case frame.RuleRegister:
			if rule.Reg == reg {
				want = RegRule{Kind: RegSame}
			}
		}
	}
	if got != want {
		return name + " " + want.String()
	}
	return ""
}

func itoa(v int64) string { return RegRule{Kind: RegAtCFA, Offset: int32(v)}.String()[3:] }

// BenchmarkCompileTable compiles Debian's libruby 3.1 (about 69,000 rows)
// from its loaded call frame information: what attaching to a Ruby whose
// libruby no earlier target mapped costs for its unwind table.
func BenchmarkCompileTable(b *testing.B) {
	const path = "/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1"
	o := LoadObject(path)
	if o.Err() != nil {
		testskip.IfNotSupported(b, testskip.Missing(path, "Debian's libruby3.1", o.Err()))
	}
	b.ReportAllocs()
	for b.Loop() {
		o.tableDid = false
		if _, err := o.Table(ArchX86_64); err != nil {
			b.Fatal(err)
		}
	}
}
