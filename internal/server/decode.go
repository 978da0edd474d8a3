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

// The tags (field number and wire type) of the Envoy RLS request's
// messages' fields.
const (
	tagDomain      = 1<<3 | uint64(protowire.BytesType) // RateLimitRequest
	tagDescriptors = 2<<3 | uint64(protowire.BytesType)
	tagHits        = 3<<3 | uint64(protowire.VarintType)
	tagEntries     = 1<<3 | uint64(protowire.BytesType) // RateLimitDescriptor
	tagLimit       = 2<<3 | uint64(protowire.BytesType)
	tagDescHits    = 3<<3 | uint64(protowire.BytesType)
	tagNegative    = 4<<3 | uint64(protowire.VarintType)
	tagKey         = 1<<3 | uint64(protowire.BytesType) // RateLimitDescriptor.Entry
	tagValue       = 2<<3 | uint64(protowire.BytesType)
	tagRate        = 1<<3 | uint64(protowire.VarintType) // RateLimitDescriptor.RateLimitOverride
	tagUnit        = 2<<3 | uint64(protowire.VarintType)
	tagUnits       = 3<<3 | uint64(protowire.BytesType)
	tagWrapped     = 1<<3 | uint64(protowire.VarintType) // google.protobuf.UInt64Value, UInt32Value
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
		tag, x, v, n := nextField(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case tag == tagDomain && utf8.Valid(v):
			domain = text.str(v)
		case tag == tagHits:
			hits = uint32(x)
		case tag == tagDescriptors && d < len(descs):
			first := e
			if !decodeDescriptor(v, &descs[d], ents, eptrs, &e, text) {
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

// decodeDescriptor decodes one RateLimitDescriptor's wire form b into
// out, its entries into ents from *e on, as decodeRequest does.
func decodeDescriptor(b []byte, out *commonpb.RateLimitDescriptor, ents []commonpb.RateLimitDescriptor_Entry,
	eptrs []*commonpb.RateLimitDescriptor_Entry, e *int, text *textBuf) bool {
	for len(b) > 0 {
		tag, x, v, n := nextField(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case tag == tagNegative:
			out.IsNegativeHits = x != 0
		case tag == tagEntries && *e < len(ents):
			entry := &ents[*e]
			if !decodeEntry(v, entry, text) {
				return false
			}
			eptrs[*e] = entry
			*e++
		case tag == tagLimit && out.Limit == nil: // a second one proto would merge
			out.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{}
			if !decodeOverride(v, out.Limit) {
				return false
			}
		case tag == tagDescHits && out.HitsAddend == nil:
			x, ok := decodeWrapper(v)
			if !ok {
				return false
			}
			out.HitsAddend = wrapperspb.UInt64(x)
		default:
			return false
		}
	}
	return true
}

func decodeEntry(b []byte, out *commonpb.RateLimitDescriptor_Entry, text *textBuf) bool {
	for len(b) > 0 {
		tag, _, v, n := nextField(b)
		if n < 0 || !utf8.Valid(v) {
			return false
		}
		b = b[n:]
		switch tag {
		case tagKey:
			out.Key = text.str(v)
		case tagValue:
			out.Value = text.str(v)
		default:
			return false
		}
	}
	return true
}

func decodeOverride(b []byte, out *commonpb.RateLimitDescriptor_RateLimitOverride) bool {
	for len(b) > 0 {
		tag, x, v, n := nextField(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case tag == tagRate:
			out.RequestsPerUnit = uint32(x)
		case tag == tagUnit:
			out.Unit = typepb.RateLimitUnit(int32(x))
		case tag == tagUnits && out.UnitMultiplier == nil:
			x, ok := decodeWrapper(v)
			if !ok {
				return false
			}
			out.UnitMultiplier = wrapperspb.UInt32(uint32(x))
		default:
			return false
		}
	}
	return true
}

// decodeWrapper decodes a UInt64Value's or a UInt32Value's wire form, its
// value truncated to the field's width by the caller.
func decodeWrapper(b []byte) (uint64, bool) {
	var value uint64
	for len(b) > 0 {
		tag, x, _, n := nextField(b)
		if n < 0 || tag != tagWrapped {
			return 0, false
		}
		b, value = b[n:], x
	}
	return value, true
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

// nextField splits the first field off b: its tag (number and wire
// type), a varint's value or a length-delimited field's contents, and
// the bytes it takes, -1 for a malformed field. Results rather than a
// struct, so that they come back in registers.
func nextField(b []byte) (tag, x uint64, v []byte, size int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, -1
	}
	var m int
	switch typ {
	case protowire.VarintType:
		x, m = protowire.ConsumeVarint(b[n:])
	case protowire.BytesType:
		v, m = protowire.ConsumeBytes(b[n:])
	default:
		m = protowire.ConsumeFieldValue(num, typ, b[n:])
	}
	if m < 0 {
		return 0, 0, nil, -1
	}
	return protowire.EncodeTag(num, typ), x, v, n + m
}

// measureRequest walks the wire form b of a RateLimitRequest and returns
// its shape, stopping once it has counted most descriptors; malformed
// input is left to the decoders.
func measureRequest(b []byte, most int) requestShape {
	var s requestShape
	for len(b) > 0 && s.descriptors < most {
		tag, _, v, n := nextField(b)
		if n < 0 {
			return s
		}
		b = b[n:]
		switch tag {
		case tagDomain:
			s.text += len(v)
		case tagDescriptors:
			s.descriptors++
			measureDescriptor(v, &s)
		}
	}
	return s
}

// measureDescriptor adds a descriptor's entries and their text to s.
func measureDescriptor(b []byte, s *requestShape) {
	for len(b) > 0 {
		tag, _, v, n := nextField(b)
		if n < 0 {
			return
		}
		b = b[n:]
		if tag != tagEntries {
			continue
		}
		s.entries++
		for len(v) > 0 {
			_, _, text, n := nextField(v)
			if n < 0 {
				return
			}
			v, s.text = v[n:], s.text+len(text)
		}
	}
}
