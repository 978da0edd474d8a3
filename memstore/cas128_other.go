//go:build !(amd64 || arm64) || race || sluice_nocas128

package memstore

// hasCAS128 is false where no 16-byte compare-and-swap is used, and a
// two-word state is decided under its key's lock: other architectures,
// builds for the race detector, which cannot see an assembly access and
// would report the lock holder's plain writes that the swap races with by
// design, and builds with the tag sluice_nocas128 (the lock, to compare).
const hasCAS128 = false

func cas128(*int64, int64, int64, int64, int64) bool { panic("memstore: no cas128") }
