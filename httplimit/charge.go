package httplimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/felixge/httpsnoop"

	"github.com/sluicehq/sluice"
)

// CostSource says where an answer reports what its request cost, for
// Policy.CostFrom. The zero CostSource reads nothing: the cost taken at
// the door stands.
type CostSource struct {
	kind costKind
	name string   // the header's, canonical
	path []string // the JSON field's
}

type costKind uint8

const (
	costNone costKind = iota
	costHeader
	costBytes
	costJSON
)

// CostFromHeader reads the cost from the answer's header name: a whole
// number.
func CostFromHeader(name string) CostSource {
	return CostSource{kind: costHeader, name: http.CanonicalHeaderKey(name)}
}

// CostFromBytes charges the bytes of the answer's body.
func CostFromBytes() CostSource { return CostSource{kind: costBytes} }

// CostFromJSON reads the cost from the field at path, dot-separated
// ("usage.total_tokens"), of a JSON answer, or, in a text/event-stream, of
// the events' JSON data: each event that carries it settles the cost
// again, so the last one stands (OpenAI's stream_options.include_usage
// puts it in the last event). Only the first MiB of a JSON body is read
// for it, and of each event.
func CostFromJSON(path string) CostSource {
	return CostSource{kind: costJSON, path: strings.Split(path, ".")}
}

// ParseCostSource parses the policy file's spelling of a CostSource:
// "header:NAME", "bytes" or "json:PATH".
func ParseCostSource(spec string) (CostSource, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch {
	case kind == "header" && arg != "":
		return CostFromHeader(arg), nil
	case kind == "bytes" && arg == "" && !strings.Contains(spec, ":"):
		return CostFromBytes(), nil
	case kind == "json" && arg != "" && !slices.Contains(strings.Split(arg, "."), ""):
		return CostFromJSON(arg), nil
	}
	return CostSource{}, fmt.Errorf("cost source %q: want header:NAME, bytes or json:PATH (such as json:usage.total_tokens)", spec)
}

// String returns the policy file's spelling, or "" for the zero source.
func (c CostSource) String() string {
	switch c.kind {
	case costHeader:
		return "header:" + c.name
	case costBytes:
		return "bytes"
	case costJSON:
		return "json:" + strings.Join(c.path, ".")
	}
	return ""
}

// maxScan bounds what is kept of a body, or of one event, looking for a
// JSON cost.
const maxScan = 1 << 20

// maxCost is the largest cost an answer may report: 2^53, exact in every
// store.
const maxCost = 1 << 53

// Settlement is one policy's charge settled from its answer, for
// Options.OnSettle.
type Settlement struct {
	Policy *Policy
	// Estimate is what the door took; Actual what the request was
	// charged in the end (Estimate when the answer did not say).
	Estimate, Actual int64
	// Err says why the answer's cost could not be read (missing, not a
	// whole number, negative, past 2^53), in which case the estimate
	// stands; nil otherwise.
	Err error
}

var errNoCost = errors.New("the answer does not report its cost")

// settling is one request's charges to settle from its answer: the
// requests of the policies that charge by their answer, decided and
// allowed at the door.
type settling struct {
	m     *Middleware
	r     *http.Request
	h     http.Header // the answer's, as the handler sets it
	taken time.Time
	items []charge
	// What the answer has shown so far.
	status  int // 0 until the header is written
	written int64
	scan    usageScanner
}

// charge is one request of a policy that charges by its answer.
type charge struct {
	p                 *Policy
	req               sluice.Request
	estimate, charged int64
	mode              sluice.FailMode
	done              bool // settled for good: its status does not charge
	err               error
}

// wrap returns w watched for the answer, and the settling of its charges.
func (s *settling) wrap(w http.ResponseWriter) http.ResponseWriter {
	for i := range s.items {
		if c := &s.items[i]; c.p.CostFrom.kind == costJSON && s.scan.path == nil {
			s.scan.path = c.p.CostFrom.path
		}
	}
	s.h = w.Header()
	return httpsnoop.Wrap(w, httpsnoop.Hooks{
		WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
			return func(code int) {
				s.header(w.Header(), code)
				next(code)
			}
		},
		Write: func(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
			return func(b []byte) (int, error) {
				s.header(w.Header(), http.StatusOK)
				s.body(w.Header(), b)
				n, err := next(b)
				s.written += int64(n)
				return n, err
			}
		},
		ReadFrom: func(next httpsnoop.ReadFromFunc) httpsnoop.ReadFromFunc {
			return func(src io.Reader) (int64, error) {
				s.header(w.Header(), http.StatusOK)
				if s.scan.path == nil {
					n, err := next(src)
					s.written += n
					return n, err
				}
				// Through Write, so that the body is looked at.
				return io.Copy(writerFunc(func(b []byte) (int, error) {
					s.body(w.Header(), b)
					n, err := w.Write(b)
					s.written += int64(n)
					return n, err
				}), src)
			}
		},
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// header settles what the status and the headers say, once: a status a
// policy does not charge gives its whole cost back, and a header source
// settles to the header's number.
func (s *settling) header(h http.Header, code int) {
	if s.status != 0 || code < 200 {
		return // written already, or an informational answer
	}
	s.status = code
	for i := range s.items {
		c := &s.items[i]
		if len(c.p.ChargeStatus) > 0 && !slices.Contains(c.p.ChargeStatus, code) {
			s.settle(c, 0)
			c.done = true
			continue
		}
		if c.p.CostFrom.kind == costHeader {
			v, err := wholeNumber(h.Get(c.p.CostFrom.name))
			if err != nil {
				c.err = fmt.Errorf("header %s: %w", c.p.CostFrom.name, err)
				continue
			}
			s.settle(c, v)
		}
	}
}

// body looks at b, the next bytes of the answer, for a JSON cost, and
// settles to what it finds before b reaches the client.
func (s *settling) body(h http.Header, b []byte) {
	if s.scan.path == nil {
		return
	}
	v, ok, err := s.scan.write(h, b)
	if !ok {
		return
	}
	for i := range s.items {
		if c := &s.items[i]; c.p.CostFrom.kind == costJSON {
			if err != nil {
				c.err = err
				continue
			}
			c.err = nil
			s.settle(c, v)
		}
	}
}

// finish settles what only the answer's end says (bytes), and reports
// each charge.
func (s *settling) finish() {
	s.header(s.h, http.StatusOK) // a handler that wrote nothing answers 200, with the headers it set
	for i := range s.items {
		c := &s.items[i]
		switch {
		case c.done:
		case c.p.CostFrom.kind == costBytes:
			s.settle(c, s.written)
		case c.p.CostFrom.kind == costJSON && !s.scan.found && c.err == nil:
			c.err = fmt.Errorf("json %s: %w", strings.Join(c.p.CostFrom.path, "."), errNoCost)
		}
		if c.err != nil {
			s.m.log.note(s.r.Context(), slog.LevelWarn, c.p.Name+" (cost)", "the answer's cost could not be read; the estimate stands",
				slog.String("cost_from", c.p.CostFrom.String()), slog.String("error", c.err.Error()))
		}
		if s.m.opts.OnSettle != nil {
			s.m.opts.OnSettle(s.r, Settlement{Policy: c.p, Estimate: c.estimate, Actual: c.charged, Err: c.err})
		}
	}
}

// settle moves c's charge to actual.
func (s *settling) settle(c *charge, actual int64) {
	if c.done || actual == c.charged {
		return
	}
	// Detached from the request: a client gone mid-answer is still
	// charged what the answer reported.
	s.m.guard.Settle(context.WithoutCancel(s.r.Context()), c.p.Name, c.req, s.taken, c.charged, actual, c.mode)
	c.charged = actual
}

// wholeNumber parses a cost an answer reports.
func wholeNumber(v string) (int64, error) {
	if v == "" {
		return 0, errNoCost
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a whole number", v)
	case n < 0:
		return 0, fmt.Errorf("%d is negative", n)
	case n > maxCost:
		return 0, fmt.Errorf("%d is past 2^53", n)
	}
	return n, nil
}

// usageScanner finds a cost in an answer's body: the field at path of a
// JSON document, or of the JSON data of each event of a text/event-stream.
type usageScanner struct {
	path  []string
	buf   []byte // the JSON body so far, or the event being read
	over  bool   // a JSON body past maxScan: no longer looked at
	found bool   // a value was found (or a bad one)
}

// write looks at b. It reports ok when it found the field (or found it
// bad: err), which it does at most once per event, or once for a JSON
// document, when the document is complete.
func (u *usageScanner) write(h http.Header, b []byte) (v int64, ok bool, err error) {
	if strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		return u.events(b)
	}
	if u.over || u.found {
		return 0, false, nil
	}
	if len(u.buf)+len(b) > maxScan {
		u.over, u.buf = true, nil
		return 0, true, fmt.Errorf("json %s: %w in the first MiB", strings.Join(u.path, "."), errNoCost)
	}
	u.buf = append(u.buf, b...)
	t := bytes.TrimRight(u.buf, " \t\r\n")
	if len(t) == 0 || t[len(t)-1] != '}' || !json.Valid(t) {
		return 0, false, nil // not a whole document yet
	}
	u.found = true
	v, err = u.field(t)
	u.buf = nil
	return v, true, err
}

// events looks at the events b completes; a value in the last of them
// that carries the field is reported.
func (u *usageScanner) events(b []byte) (v int64, ok bool, err error) {
	u.buf = append(u.buf, b...)
	for {
		end, skip := eventEnd(u.buf)
		if end < 0 {
			if len(u.buf) > maxScan {
				u.buf = u.buf[:0] // an event past maxScan is not looked at
			}
			return v, ok, err
		}
		data := eventData(u.buf[:end])
		u.buf = u.buf[:copy(u.buf, u.buf[end+skip:])]
		if len(data) == 0 || !bytes.Contains(data, []byte(`"`+u.path[len(u.path)-1]+`"`)) || !json.Valid(data) {
			continue
		}
		if fv, ferr := u.field(data); !errors.Is(ferr, errNoCost) {
			v, ok, err, u.found = fv, true, ferr, true
		}
	}
}

// eventEnd returns where the first event of b ends and the length of the
// blank line after it, or -1.
func eventEnd(b []byte) (int, int) {
	i, j := bytes.Index(b, []byte("\n\n")), bytes.Index(b, []byte("\r\n\r\n"))
	switch {
	case i < 0 && j < 0:
		return -1, 0
	case j >= 0 && (i < 0 || j < i):
		return j, 4
	}
	return i, 2
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

// field returns the whole number at u.path in the JSON document doc.
func (u *usageScanner) field(doc []byte) (int64, error) {
	name := "json " + strings.Join(u.path, ".")
	var x any
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	if err := d.Decode(&x); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	for _, k := range u.path {
		obj, ok := x.(map[string]any)
		if !ok {
			return 0, fmt.Errorf("%s: %w", name, errNoCost)
		}
		if x, ok = obj[k]; !ok {
			return 0, fmt.Errorf("%s: %w", name, errNoCost)
		}
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
