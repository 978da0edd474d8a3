package server

import (
	"unicode/utf8"
	"unsafe"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Field numbers of the Envoy RLS request's messages.
const (
	requestDomain      = 1 // RateLimitRequest
	requestDescriptors = 2
	requestHits        = 3
	descEntries        = 1 // RateLimitDescriptor
	descLimit          = 2
	descHits           = 3
	descNegative       = 4
	entryKey           = 1 // RateLimitDescriptor.Entry
	entryValue         = 2
	limitRate          = 1 // RateLimitDescriptor.RateLimitOverride
	limitUnit          = 2
	limitUnits         = 3
	wrapperValue       = 1 // google.protobuf.UInt64Value, UInt32Value
)

// requestShape is what a first walk of a request's wire form finds: how
// many descriptors and entries it holds, and the bytes of its strings.
type requestShape struct {
	descriptors, entries, text int
}

// decodeRequest decodes the wire form b of a RateLimitRequest into req,
// which must be empty, exactly as proto.Unmarshal would, in two walks
// and five allocations whatever the request's size: its descriptors,
// its entries, a pointer slice for each, and one copy of its strings'
// bytes, which the strings share (an override or a hits_addend adds one
// each). proto.Unmarshal's reflection makes one allocation per message,
// per repeated field and per string: 7 for one descriptor of one entry,
// 21 for two of two, its slices grown as it appends.
//
// It decodes what proto.Unmarshal decodes to the same message; anything
// else (a field it does not know, a wire type other than the field's, a
// singular message sent twice, which proto merges, a string that is not
// UTF-8, a malformed tag or length) makes it report false having
// written nothing, and the caller decodes b with proto.Unmarshal, which
// keeps unknown fields and reports errors as it always has. The listener
// reads what it refuses (more than maxDescriptors descriptors) from
// shape before it decodes anything.
func decodeRequest(b []byte, req *rlspb.RateLimitRequest, shape requestShape) bool {
	descs := make([]commonpb.RateLimitDescriptor, shape.descriptors)
	dptrs := make([]*commonpb.RateLimitDescriptor, shape.descriptors)
	ents := make([]commonpb.RateLimitDescriptor_Entry, shape.entries)
	eptrs := make([]*commonpb.RateLimitDescriptor_Entry, shape.entries)
	text := &textBuf{b: make([]byte, 0, shape.text)}
	var domain string
	var hits uint32
	d, e := 0, 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == requestDomain && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return false
			}
			domain, b = text.str(v), b[n:]
		case num == requestHits && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			hits, b = uint32(v), b[n:]
		case num == requestDescriptors && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			first := e
			if d == len(descs) || !decodeDescriptor(v, &descs[d], ents, eptrs, &e, text) {
				return false
			}
			if e > first {
				descs[d].Entries = eptrs[first:e:e]
			}
			dptrs[d] = &descs[d]
			d++
		default:
			return false
		}
	}
	req.Domain, req.HitsAddend = domain, hits
	if d > 0 {
		req.Descriptors = dptrs[:d]
	}
	return true
}

// decodeDescriptor decodes one RateLimitDescriptor's wire form v into
// out, its entries into ents from *e on, as decodeRequest does.
func decodeDescriptor(v []byte, out *commonpb.RateLimitDescriptor, ents []commonpb.RateLimitDescriptor_Entry,
	eptrs []*commonpb.RateLimitDescriptor_Entry, e *int, text *textBuf) bool {
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return false
		}
		v = v[n:]
		switch {
		case num == descNegative && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return false
			}
			out.IsNegativeHits, v = x != 0, v[n:]
			continue
		case typ != protowire.BytesType:
			return false
		}
		m, n := protowire.ConsumeBytes(v)
		if n < 0 {
			return false
		}
		v = v[n:]
		switch num {
		case descEntries:
			if *e == len(ents) {
				return false
			}
			entry := &ents[*e]
			if !decodeEntry(m, entry, text) {
				return false
			}
			eptrs[*e] = entry
			*e++
		case descLimit:
			if out.Limit != nil { // merged by proto
				return false
			}
			out.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{}
			if !decodeOverride(m, out.Limit) {
				return false
			}
		case descHits:
			x, ok := decodeWrapper(m)
			if !ok || out.HitsAddend != nil {
				return false
			}
			out.HitsAddend = wrapperspb.UInt64(x)
		default:
			return false
		}
	}
	return true
}

func decodeEntry(v []byte, out *commonpb.RateLimitDescriptor_Entry, text *textBuf) bool {
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 || typ != protowire.BytesType || num != entryKey && num != entryValue {
			return false
		}
		v = v[n:]
		s, n := protowire.ConsumeBytes(v)
		if n < 0 || !utf8.Valid(s) {
			return false
		}
		v = v[n:]
		if num == entryKey {
			out.Key = text.str(s)
		} else {
			out.Value = text.str(s)
		}
	}
	return true
}

// textBuf holds a request's strings' bytes, sized for them all by its
// first walk: a string decoded is a view of the bytes appended. The
// buffer is never written again, so the strings stay immutable.
type textBuf struct{ b []byte }

func (t *textBuf) str(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	t.b = append(t.b, v...) // within its capacity, unless the walks disagree: then a copy, and the views before it still hold
	return unsafe.String(&t.b[len(t.b)-len(v)], len(v))
}

func decodeOverride(v []byte, out *commonpb.RateLimitDescriptor_RateLimitOverride) bool {
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return false
		}
		v = v[n:]
		switch {
		case num == limitRate && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return false
			}
			out.RequestsPerUnit, v = uint32(x), v[n:]
		case num == limitUnit && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return false
			}
			out.Unit, v = typepb.RateLimitUnit(int32(x)), v[n:]
		case num == limitUnits && typ == protowire.BytesType && out.UnitMultiplier == nil:
			m, n := protowire.ConsumeBytes(v)
			if n < 0 {
				return false
			}
			x, ok := decodeWrapper(m)
			if !ok {
				return false
			}
			out.UnitMultiplier, v = wrapperspb.UInt32(uint32(x)), v[n:]
		default:
			return false
		}
	}
	return true
}

// decodeWrapper decodes a UInt64Value's or a UInt32Value's wire form, its
// value truncated to the field's width by the caller.
func decodeWrapper(v []byte) (uint64, bool) {
	var x uint64
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 || num != wrapperValue || typ != protowire.VarintType {
			return 0, false
		}
		v = v[n:]
		x, n = protowire.ConsumeVarint(v)
		if n < 0 {
			return 0, false
		}
		v = v[n:]
	}
	return x, true
}

// measureRequest walks the wire form b of a RateLimitRequest and returns
// its shape, stopping once it has counted most descriptors; malformed
// input is left to the decoders.
func measureRequest(b []byte, most int) requestShape {
	var s requestShape
	for len(b) > 0 && s.descriptors < most {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return s
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return s
		}
		field := b[:n]
		b = b[n:]
		if typ != protowire.BytesType {
			continue
		}
		v, _ := protowire.ConsumeBytes(field)
		switch num {
		case requestDomain:
			s.text += len(v)
		case requestDescriptors:
			s.descriptors++
			measureDescriptor(v, &s)
		}
	}
	return s
}

// measureDescriptor adds a descriptor's entries and their text to s.
func measureDescriptor(v []byte, s *requestShape) {
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return
		}
		v = v[n:]
		n = protowire.ConsumeFieldValue(num, typ, v)
		if n < 0 {
			return
		}
		field := v[:n]
		v = v[n:]
		if num != descEntries || typ != protowire.BytesType {
			continue
		}
		s.entries++
		m, _ := protowire.ConsumeBytes(field)
		for len(m) > 0 {
			num, typ, n := protowire.ConsumeTag(m)
			if n < 0 {
				return
			}
			m = m[n:]
			n = protowire.ConsumeFieldValue(num, typ, m)
			if n < 0 {
				return
			}
			if typ == protowire.BytesType {
				x, _ := protowire.ConsumeBytes(m[:n])
				s.text += len(x)
			}
			m = m[n:]
		}
	}
}
