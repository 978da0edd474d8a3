package shard

import (
	"hash/fnv"
	"testing"

	"pgregory.net/rapid"
)

// hashFNV is the standard library's FNV-1a with the same finalizer, bit
// for bit: instances of different versions must agree on every key's
// owner.
func TestHashFNVMatchesTheStandardLibrary(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.String().Draw(t, "key")
		h := fnv.New64a()
		h.Write([]byte(key))
		k := h.Sum64()
		k ^= k >> 33
		k *= 0xff51afd7ed558ccd
		k ^= k >> 33
		k *= 0xc4ceb9fe1a85ec53
		k ^= k >> 33
		if got := hashFNV(key); got != k {
			t.Fatalf("hashFNV(%q) = %x, want %x", key, got, k)
		}
		if got := HashFNV([]byte(key)); got != k {
			t.Fatalf("HashFNV(%q) = %x, want %x", key, got, k)
		}
	})
}

func BenchmarkOwner(b *testing.B) {
	r := NewRing([]string{"10.0.0.1:8081", "10.0.0.2:8081", "10.0.0.3:8081"}, 128, nil)
	b.ReportAllocs()
	for range b.N {
		r.Owner("key-00000000042")
	}
}
