package server

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// decodeLenient decodes b into m as proto.Unmarshal does, but for a
// string field that is not valid UTF-8, which it keeps as it is where
// proto.Unmarshal fails: a check request's identity that is not UTF-8
// then reaches the door, which refuses it with InvalidArgument, as every
// door refuses it (door.Identity), where a codec's error is answered
// Internal. String and message fields are read here, field by field;
// every other field is merged by proto.Unmarshal. A map field, or
// anything malformed, is an error.
func decodeLenient(b []byte, m protoreflect.Message) error {
	fields := m.Descriptor().Fields()
	var rest []byte // the fields proto.Unmarshal merges
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		size := protowire.ConsumeFieldValue(num, typ, b[n:])
		if size < 0 {
			return protowire.ParseError(size)
		}
		field := b[:n+size]
		b = b[n+size:]
		fd := fields.ByNumber(num)
		if fd == nil || typ != protowire.BytesType || fd.IsMap() ||
			fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.MessageKind {
			rest = append(rest, field...)
			continue
		}
		v, _ := protowire.ConsumeBytes(field[n:])
		switch {
		case fd.Kind() == protoreflect.StringKind && fd.IsList():
			m.Mutable(fd).List().Append(protoreflect.ValueOfString(string(v)))
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(string(v)))
		case fd.IsList():
			l := m.Mutable(fd).List()
			e := l.NewElement()
			if err := decodeLenient(v, e.Message()); err != nil {
				return err
			}
			l.Append(e)
		default:
			if err := decodeLenient(v, m.Mutable(fd).Message()); err != nil {
				return err
			}
		}
	}
	if len(rest) == 0 {
		return nil
	}
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(rest, m.Interface()); err != nil {
		return errors.Join(errors.New("malformed request"), err)
	}
	return nil
}
