//go:build !(amd64 || arm64) || race

package memstore

// hasCAS128 is false where no 16-byte compare-and-swap is used: other
// architectures, and builds for the race detector, which cannot see an
// assembly access and would report the lock holder's plain writes that
// the swap races with by design.
const hasCAS128 = false

func cas128(*int64, int64, int64, int64, int64) bool { panic("memstore: no cas128") }
