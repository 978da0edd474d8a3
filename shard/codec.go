package shard

import (
	"encoding/binary"
	"errors"
	"strings"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
)

// The peer protocol's payloads are compact binary: varints, and keys as
// length-prefixed bytes. A decoder given garbage returns errMalformed,
// never panics and never allocates more than the input justifies.
var errMalformed = errors.New("shard: malformed peer message")

// Bounds a decoder enforces.
const (
	maxCallReqs  = 64
	maxKeyBytes  = sluice.MaxKeyLen
	maxZoneBytes = 255
)

func appendCalls(b []byte, calls []wireCall) []byte {
	b = binary.AppendUvarint(b, uint64(len(calls)))
	for _, c := range calls {
		b = append(b, boolByte(c.Reset))
		b = binary.AppendUvarint(b, uint64(len(c.Reqs)))
		for _, r := range c.Reqs {
			b = binary.AppendUvarint(b, uint64(len(r.Key)))
			b = append(b, r.Key...)
			b = append(b, byte(r.Algorithm), boolByte(r.Force))
			for _, v := range [...]int64{r.Rate, int64(r.Period), r.Burst, r.Cost, r.NowUnixUS} {
				b = binary.AppendVarint(b, v)
			}
			b = binary.AppendUvarint(b, uint64(len(r.Zone)))
			b = append(b, r.Zone...)
		}
	}
	return b
}

func appendResults(b []byte, results []wireResult) []byte {
	b = binary.AppendUvarint(b, uint64(len(results)))
	for _, r := range results {
		b = binary.AppendUvarint(b, uint64(len(r.Err)))
		b = append(b, r.Err...)
		b = binary.AppendUvarint(b, uint64(len(r.Decisions)))
		for _, d := range r.Decisions {
			b = append(b, boolByte(d.Allowed))
			for _, v := range [...]int64{d.Remaining, int64(d.RetryAfter), int64(d.ResetAfter), int64(d.Delay)} {
				b = binary.AppendVarint(b, v)
			}
		}
	}
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// reader decodes, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint(limit uint64) uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > limit {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// bytes returns the next length-prefixed bytes as a string that shares the
// message's memory: valid while the message is, which is the whole of one
// serve (stores do not retain keys).
func (r *reader) bytes(limit uint64) string {
	n := r.uvarint(limit)
	if uint64(len(r.b)) < n {
		r.fail()
		return ""
	}
	var s string
	if n > 0 {
		s = unsafe.String(&r.b[0], n)
	}
	r.b = r.b[n:]
	return s
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errMalformed
	}
	r.b = nil
}

func decodeCalls(b []byte) ([]wireCall, error) {
	r := &reader{b: b}
	calls := make([]wireCall, r.uvarint(maxBatch))
	slab := make([]wireRequest, 0, len(calls)) // most calls are one request
	for i := range calls {
		calls[i].Reset = r.byte() == 1
		reqs := carve(&slab, int(r.uvarint(maxCallReqs)))
		for j := range reqs {
			q := &reqs[j]
			q.Key = r.bytes(maxKeyBytes)
			q.Algorithm = sluice.Algorithm(r.byte())
			q.Force = r.byte() == 1
			q.Rate, q.Period, q.Burst, q.Cost, q.NowUnixUS = r.varint(), time.Duration(r.varint()), r.varint(), r.varint(), r.varint()
			q.Zone = r.bytes(maxZoneBytes)
		}
		calls[i].Reqs = reqs
		if r.err != nil {
			return nil, r.err
		}
	}
	return calls, r.err
}

func decodeResults(b []byte) ([]wireResult, error) {
	r := &reader{b: b}
	results := make([]wireResult, r.uvarint(maxBatch))
	slab := make([]wireDecision, 0, len(results)) // most calls are one request
	for i := range results {
		results[i].Err = strings.Clone(r.bytes(1 << 16)) // kept past the message
		ds := carve(&slab, int(r.uvarint(maxCallReqs)))
		for j := range ds {
			ds[j].Allowed = r.byte() == 1
			ds[j].Remaining, ds[j].RetryAfter, ds[j].ResetAfter, ds[j].Delay = r.varint(), time.Duration(r.varint()), time.Duration(r.varint()), time.Duration(r.varint())
		}
		results[i].Decisions = ds
		if r.err != nil {
			return nil, r.err
		}
	}
	return results, r.err
}

// carve returns n elements from the spare capacity of *slab, or new ones
// when it has too few: a batch's calls share one allocation.
func carve[T any](slab *[]T, n int) []T {
	if s := *slab; cap(s)-len(s) >= n {
		*slab = s[:len(s)+n]
		return s[len(s) : len(s)+n : len(s)+n]
	}
	return make([]T, n)
}
