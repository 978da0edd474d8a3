package httplimit

// usageScanner reads a cost from an answer's body as it is written: the
// field at a path of a JSON object, or of the JSON data of each event of
// a text/event-stream. Each byte is looked at a bounded number of times
// however the body is cut into writes: a JSON object's end is found by
// tracking its strings and nesting across writes, and the document is
// parsed once, when it is whole; an event's end is searched for only in
// the bytes that came since the last search.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// usageScanner finds a cost in an answer's body: the field at path of a
// JSON document, or of the JSON data of each event of a text/event-stream.
type usageScanner struct {
	path   []string
	events bool // the answer is a text/event-stream; set before the first write
	buf    []byte
	found  bool // a value was found (or a bad one)

	// A JSON document.
	n         int64 // bytes of the body seen
	over      bool  // past maxScan before its end: no longer looked at
	notObject bool  // it does not start with '{'
	depth     int   // of its objects and arrays open
	inString  bool  // within a string
	escaped   bool  // within a string, after a backslash

	// An event stream: buf holds the event being read, of which the
	// first searched bytes hold no event's end.
	searched int
	count    int64 // events that carried data
}

// write looks at b. It reports ok when it found the field (or found it
// bad: err), which it does at most once per event, or once for a JSON
// document, when the document is complete.
func (u *usageScanner) write(b []byte) (v int64, ok bool, err error) {
	if u.events {
		return u.event(b)
	}
	if u.over || u.found {
		return 0, false, nil
	}
	if u.n += int64(len(b)); u.n > maxScan {
		u.over, u.buf = true, nil
		return 0, true, fmt.Errorf("json %s: %w in the first MiB", strings.Join(u.path, "."), errNoCost)
	}
	if u.notObject {
		return 0, false, nil
	}
	end := u.track(b)
	if u.notObject {
		u.buf = nil
		return 0, false, nil
	}
	if end < 0 {
		u.buf = append(u.buf, b...)
		return 0, false, nil // not a whole document yet
	}
	doc := append(u.buf, b[:end+1]...)
	u.found, u.buf = true, nil
	v, err = u.field(doc)
	return v, true, err
}

// track follows the JSON document through b, the next bytes of it, and
// returns where in b its top-level object ends, or -1.
func (u *usageScanner) track(b []byte) int {
	for i := 0; i < len(b); i++ {
		if u.inString {
			if u.escaped {
				u.escaped = false
				continue
			}
			j := bytes.IndexAny(b[i:], `"\`)
			if j < 0 {
				return -1
			}
			if i += j; b[i] == '"' {
				u.inString = false
			} else {
				u.escaped = true
			}
			continue
		}
		switch c := b[i]; {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
		case u.depth == 0 && c != '{':
			u.notObject = true
			return -1
		case c == '"':
			u.inString = true
		case c == '{' || c == '[':
			u.depth++
		case c == '}' || c == ']':
			if u.depth--; u.depth == 0 {
				return i
			}
		}
	}
	return -1
}

// event looks at the events b completes; a value in the last of them
// that carries the field is reported.
func (u *usageScanner) event(b []byte) (v int64, ok bool, err error) {
	u.buf = append(u.buf, b...)
	start := 0 // of the event being read
	for {
		end, skip := eventEnd(u.buf[start:], u.searched)
		if end < 0 {
			u.searched = max(len(u.buf)-start-3, 0) // a blank line may be cut by the write
			break
		}
		u.searched = 0
		data := eventData(u.buf[start : start+end])
		start += end + skip
		if len(data) == 0 {
			continue
		}
		u.count++
		if !bytes.Contains(data, []byte(`"`+u.path[len(u.path)-1]+`"`)) || !json.Valid(data) {
			continue
		}
		if fv, ferr := u.field(data); !errors.Is(ferr, errNoCost) {
			v, ok, err, u.found = fv, true, ferr, true
		}
	}
	if start > 0 {
		u.buf = u.buf[:copy(u.buf, u.buf[start:])]
	}
	if len(u.buf) > maxScan {
		u.buf, u.searched = u.buf[:0], 0 // an event past maxScan is not looked at
	}
	return v, ok, err
}

// eventEnd returns where the first event of b ends and the length of the
// blank line after it, or -1; the first from bytes of b hold no blank
// line.
func eventEnd(b []byte, from int) (int, int) {
	i, j := bytes.Index(b[from:], []byte("\n\n")), bytes.Index(b[from:], []byte("\r\n\r\n"))
	switch {
	case i < 0 && j < 0:
		return -1, 0
	case j >= 0 && (i < 0 || j < i):
		return from + j, 4
	}
	return from + i, 2
}

// eventData returns the data lines of an event, joined by newlines.
func eventData(ev []byte) []byte {
	var data []byte
	for line := range bytes.Lines(ev) {
		line = bytes.TrimRight(line, "\r\n")
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(d, []byte(" "))...)
		}
	}
	return data
}

// field returns the whole number at u.path in the JSON document doc. Only
// the objects on the path are parsed into maps; the values beside it are
// kept as raw bytes.
func (u *usageScanner) field(doc []byte) (int64, error) {
	name := "json " + strings.Join(u.path, ".")
	raw := json.RawMessage(doc)
	for i, k := range u.path {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			if i == 0 && !json.Valid(raw) {
				return 0, fmt.Errorf("%s: %w", name, err)
			}
			return 0, fmt.Errorf("%s: %w", name, errNoCost) // not an object
		}
		var ok bool
		if raw, ok = obj[k]; !ok {
			return 0, fmt.Errorf("%s: %w", name, errNoCost)
		}
	}
	var x any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&x); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	n, ok := x.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%s: %v is not a number", name, x)
	}
	v, err := wholeNumber(n.String())
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}
