package shard

import (
	"hash/fnv"
	"slices"
	"strconv"
)

// Ring is a consistent-hash ring with virtual nodes, as groupcache's
// consistenthash: each member appears Replicas times, and a key belongs to
// the first point at or after its hash. Adding or removing one member moves
// only the keys it gains or loses. A Ring is immutable: membership changes
// build a new one.
type Ring struct {
	hash    func([]byte) uint64
	points  []uint64
	owners  map[uint64]string
	members []string
}

// HashFNV is the default hash: 64-bit FNV-1a, then murmur3's finalizer.
// FNV-1a alone barely moves the high bits for keys that differ in their
// last byte ("user-1", "user-2"), and the ring places keys by the high
// bits: without the finalizer such keys crowd onto one member. The hash is
// the same in every process, as the ring needs.
func HashFNV(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	k := h.Sum64()
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// NewRing returns a ring of members, each with replicas virtual nodes,
// hashed with hash (HashFNV when nil).
func NewRing(members []string, replicas int, hash func([]byte) uint64) *Ring {
	if hash == nil {
		hash = HashFNV
	}
	r := &Ring{hash: hash, owners: map[uint64]string{}, members: slices.Sorted(slices.Values(members))}
	r.members = slices.Compact(r.members)
	for _, m := range r.members {
		for i := range replicas {
			p := hash([]byte(strconv.Itoa(i) + "\x00" + m))
			if _, taken := r.owners[p]; !taken {
				r.owners[p] = m
				r.points = append(r.points, p)
			}
		}
	}
	slices.Sort(r.points)
	return r
}

// Members returns the ring's members, sorted.
func (r *Ring) Members() []string { return r.members }

// Owner returns the member that owns key, or "" for an empty ring.
func (r *Ring) Owner(key string) string {
	if len(r.points) == 0 {
		return ""
	}
	h := r.hash([]byte(key))
	i, _ := slices.BinarySearch(r.points, h)
	if i == len(r.points) {
		i = 0
	}
	return r.owners[r.points[i]]
}
