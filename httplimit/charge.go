package httplimit

import (
	"context"
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

// CostFromBytes charges the bytes of the answer's body as its client
// reads them: decoded from its Content-Encoding (gzip, deflate, br,
// zstd), up to 1,024 bytes for each byte sent, plus 64 KiB.
func CostFromBytes() CostSource { return CostSource{kind: costBytes} }

// CostFromJSON reads the cost from the field at path, dot-separated
// ("usage.total_tokens"), of a JSON answer, or, in a text/event-stream, of
// the events' JSON data: each event that carries it settles the cost
// again, so the last one stands (OpenAI's stream_options.include_usage
// puts it in the last event). The body is read decoded from its
// Content-Encoding, as for CostFromBytes; only the first MiB of a JSON
// body is read for it, and of each event.
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
	// charged in the end (by Policy.CostUnread's rule when the answer did
	// not say).
	Estimate, Actual int64
	// Err says why the answer's cost could not be read (missing, not a
	// whole number, negative, past 2^53, a stream cut before it, a
	// Content-Encoding that cannot be decoded), in which case
	// Policy.CostUnread's rule charged it; nil otherwise.
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
	status  int   // 0 until the header is written
	written int64 // bytes sent, encoded as the answer is
	// The body as its client reads it, for the charges that read it
	// (reads): decoded (dec) from the codings of its Content-Encoding,
	// known at its first bytes (opened).
	reads     bool
	opened    bool
	codings   []string
	codingErr error // the Content-Encoding cannot be decoded
	dec       *decoder
	decoded   int64 // bytes of the body, decoded
	scan      usageScanner
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

// readsBody reports whether a policy in items reads its cost from the
// answer's body, and, if so, leaves in the request's Accept-Encoding only
// the codings that the body's reader decodes.
func (s *settling) readsBody() bool {
	for i := range s.items {
		switch c := &s.items[i]; c.p.CostFrom.kind {
		case costJSON:
			if s.scan.path == nil {
				s.scan.path = c.p.CostFrom.path
			}
			s.reads = true
		case costBytes:
			s.reads = true
		}
	}
	return s.reads
}

// wrap returns w watched for the answer, and the settling of its charges.
func (s *settling) wrap(w http.ResponseWriter) http.ResponseWriter {
	if s.readsBody() {
		acceptDecodable(s.r.Header)
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
				s.body(b)
				n, err := next(b)
				s.written += int64(n)
				return n, err
			}
		},
		ReadFrom: func(next httpsnoop.ReadFromFunc) httpsnoop.ReadFromFunc {
			return func(src io.Reader) (int64, error) {
				s.header(w.Header(), http.StatusOK)
				if s.open(); s.scan.path == nil && s.codings == nil && s.codingErr == nil {
					n, err := next(src) // counted, not looked at
					s.written += n
					s.decoded += n
					return n, err
				}
				// Through Write, so that the body is looked at.
				return io.Copy(writerFunc(func(b []byte) (int, error) {
					s.body(b)
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

// open reads, once, what the answer's header says of its body: whether
// it is an event stream, and its codings. The header is final by the
// body's first bytes.
func (s *settling) open() {
	if !s.reads || s.opened {
		return
	}
	s.opened = true
	s.scan.events = strings.HasPrefix(s.h.Get("Content-Type"), "text/event-stream")
	s.codings, s.codingErr = contentCodings(s.h)
}

// body looks at b, the next bytes of the answer, before they reach the
// client: decoded if they are encoded.
func (s *settling) body(b []byte) {
	if !s.reads || len(b) == 0 {
		return
	}
	s.open()
	switch {
	case s.codingErr != nil:
	case s.codings == nil:
		s.read(b)
	default:
		if s.dec == nil {
			s.dec = newDecoder(s.codings, s.read)
		}
		s.dec.write(b)
	}
}

// read counts b, the next bytes of the body as its client reads it, and
// settles to the JSON cost it completes.
func (s *settling) read(b []byte) {
	s.decoded += int64(len(b))
	if s.scan.path == nil {
		return
	}
	v, ok, err := s.scan.write(b)
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

// bodyErr returns why the body could not be decoded whole, or nil.
func (s *settling) bodyErr() error {
	switch {
	case s.codingErr != nil:
		return s.codingErr
	case s.dec != nil && s.dec.err != nil:
		return s.dec.err
	}
	return nil
}

// finish settles what only the answer's end says (bytes, a cost never
// read), and reports each charge.
func (s *settling) finish() {
	s.header(s.h, http.StatusOK) // a handler that wrote nothing answers 200, with the headers it set
	if s.dec != nil {
		s.dec.close()
	}
	for i := range s.items {
		c := &s.items[i]
		switch {
		case c.done:
		case c.p.CostFrom.kind == costBytes:
			if err := s.bodyErr(); err != nil {
				c.err = fmt.Errorf("bytes: %w", err)
				break
			}
			s.settle(c, s.decoded)
		case c.p.CostFrom.kind == costJSON && !s.scan.found && c.err == nil:
			c.err = fmt.Errorf("json %s: %w", strings.Join(c.p.CostFrom.path, "."), errNoCost)
			if err := s.bodyErr(); err != nil {
				c.err = fmt.Errorf("json %s: %w", strings.Join(c.p.CostFrom.path, "."), err)
			} else if s.dec != nil && s.dec.capped {
				c.err = fmt.Errorf("json %s: %w before decoding stopped at %d bytes a byte sent", strings.Join(c.p.CostFrom.path, "."), errNoCost, maxInflation)
			}
		}
		if c.err != nil && !c.done {
			s.settle(c, s.unread(c))
			s.m.log.note(s.r.Context(), slog.LevelWarn, c.p.Name+" (cost)", "the answer's cost could not be read; the estimate stands, or more: what the answer showed, or cost.unread",
				slog.String("cost_from", c.p.CostFrom.String()), slog.Int64("charged", c.charged), slog.String("error", c.err.Error()))
		}
		if s.m.opts.OnSettle != nil {
			s.m.opts.OnSettle(s.r, Settlement{Policy: c.p, Estimate: c.estimate, Actual: c.charged, Err: c.err})
		}
	}
}

// unread returns what c is charged when its answer's cost could not be
// read: Policy.CostUnread's rule.
func (s *settling) unread(c *charge) int64 {
	var shown int64
	switch c.p.CostFrom.kind {
	case costJSON:
		if s.scan.events {
			shown = s.scan.count
		}
	case costBytes:
		shown = max(s.decoded, s.written)
	}
	return min(max(c.estimate+shown, c.p.CostUnread), maxCost)
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
