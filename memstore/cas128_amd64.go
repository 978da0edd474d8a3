//go:build !race && !sluice_nocas128

package memstore

import "golang.org/x/sys/cpu"

// hasCAS128 reports whether cas128 can be called: the processor has
// CMPXCHG16B (every x86-64 processor since 2006 but the first).
var hasCAS128 = cpu.X86.HasCX16

// cas128 sets the 16 bytes at p, which must be 16-byte aligned, to new0
// and new1 if they hold old0 and old1, in one atomic instruction
// (LOCK CMPXCHG16B), and reports whether it did.
//
//go:noescape
func cas128(p *int64, old0, old1, new0, new1 int64) (swapped bool)
