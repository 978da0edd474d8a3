package shard

import (
	"slices"
	"strconv"
)

// Ring is a consistent-hash ring with virtual nodes, as groupcache's
// consistenthash: each member appears Replicas times, and a key belongs to
// the first point at or after its hash. Adding or removing one member moves
// only the keys it gains or loses. A Ring is immutable: membership changes
// build a new one.
type Ring struct {
	hash    func([]byte) uint64 // nil: HashFNV, computed on the key's string without a copy
	points  []uint64            // sorted
	owners  []string            // owners[i] owns points[i]
	members []string
}

// HashFNV is the default hash: 64-bit FNV-1a, then murmur3's finalizer.
// FNV-1a alone barely moves the high bits for keys that differ in their
// last byte ("user-1", "user-2"), and the ring places keys by the high
// bits: without the finalizer such keys crowd onto one member. The hash is
// the same in every process, as the ring needs.
func HashFNV(b []byte) uint64 { return hashFNV(string(b)) }

// hashFNV is HashFNV of a string, without converting it: Owner runs on
// every Take of the shard store.
func hashFNV(s string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211 // FNV-1a, 64-bit
	k := uint64(offset)
	for i := 0; i < len(s); i++ {
		k ^= uint64(s[i])
		k *= prime
	}
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
	r := &Ring{hash: hash, members: slices.Compact(slices.Sorted(slices.Values(members)))}
	owners := map[uint64]string{}
	for _, m := range r.members {
		for i := range replicas {
			p := r.hashOf(strconv.Itoa(i) + "\x00" + m)
			if _, taken := owners[p]; !taken {
				owners[p] = m
				r.points = append(r.points, p)
			}
		}
	}
	slices.Sort(r.points)
	r.owners = make([]string, len(r.points))
	for i, p := range r.points {
		r.owners[i] = owners[p]
	}
	return r
}

func (r *Ring) hashOf(key string) uint64 {
	if r.hash == nil {
		return hashFNV(key)
	}
	return r.hash([]byte(key))
}

// Members returns the ring's members, sorted.
func (r *Ring) Members() []string { return r.members }

// Owner returns the member that owns key, or "" for an empty ring.
func (r *Ring) Owner(key string) string {
	if len(r.points) == 0 {
		return ""
	}
	i, _ := slices.BinarySearch(r.points, r.hashOf(key))
	if i == len(r.points) {
		i = 0
	}
	return r.owners[i]
}
