//go:build !race && !sluice_nocas128

package memstore

// hasCAS128 reports whether cas128 can be called: every ARMv8 processor
// has the exclusive pair loads and stores it is made of.
const hasCAS128 = true

// cas128 sets the 16 bytes at p, which must be 16-byte aligned, to new0
// and new1 if they hold old0 and old1, atomically (LDAXP and STLXP, again
// while another write comes between them), and reports whether it did.
//
//go:noescape
func cas128(p *int64, old0, old1, new0, new1 int64) (swapped bool)
