package httplimit

// An answer's body as its client reads it, for the policies that read
// their cost from it (CostFromJSON, CostFromBytes): the bytes pass to the
// client untouched, and a copy is decoded as its Content-Encoding says
// before the write that carries them returns.
//
// The decoders of compress/gzip, compress/zlib, brotli and zstd pull their
// input; the answer pushes it, one write at a time. So the decoding runs
// on a goroutine of its own, in lockstep with the writes: a write hands
// its bytes over and waits until the decoder asks for more, by which time
// everything those bytes decode to has reached the sink. Only one side
// runs at a time, and the channels order them.
//
// Decoding is bounded by the bytes that came: at most maxInflation
// decoded bytes per encoded byte (plus inflationSlack). gzip and deflate
// cannot pass about 1,032; a stream that would pass the bound is decoded
// no further, and is then reported capped.

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// maxInflation is how many decoded bytes each encoded byte may stand for;
// inflationSlack is what any answer may decode to beyond that.
const (
	maxInflation   = 1024
	inflationSlack = 64 << 10
)

// maxCodings bounds the content codings an answer may stack.
const maxCodings = 4

// codings are the content codings the cost reader decodes, each with its
// decoder: the table the Accept-Encoding of a request whose cost is read
// from its answer is held to.
var codings = map[string]func(io.Reader) (io.Reader, error){
	"gzip":    func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
	"x-gzip":  func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
	"deflate": deflate,
	"br":      func(r io.Reader) (io.Reader, error) { return brotli.NewReader(r), nil },
	"zstd": func(r io.Reader) (io.Reader, error) {
		// One block at a time on this goroutine; the window HTTP's zstd
		// coding allows (RFC 9659: 8 MiB).
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20), zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	},
}

// deflate decodes HTTP's deflate coding: zlib data (RFC 9110), or the raw
// deflate data some servers send instead, as browsers accept both.
func deflate(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	h, err := br.Peek(2)
	if err != nil {
		return nil, err
	}
	if h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 {
		return zlib.NewReader(br)
	}
	return flate.NewReader(br), nil
}

// contentCodings returns the codings of h's Content-Encoding in the order
// they were applied, "identity" left out, or an error naming one the cost
// reader cannot decode.
func contentCodings(h http.Header) ([]string, error) {
	var cs []string
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			if c == "" || c == "identity" {
				continue
			}
			if codings[c] == nil {
				return nil, fmt.Errorf("content-encoding %q cannot be decoded", c)
			}
			cs = append(cs, c)
		}
	}
	if len(cs) > maxCodings {
		return nil, fmt.Errorf("content-encoding %q: more than %d codings", strings.Join(cs, ", "), maxCodings)
	}
	return cs, nil
}

// acceptDecodable leaves in h's Accept-Encoding only the codings the cost
// reader decodes, so that the answer comes in one of them; "*" goes too.
// With none left the field is removed, and the answer comes unencoded.
func acceptDecodable(h http.Header) {
	vs := h.Values("Accept-Encoding")
	if len(vs) == 0 {
		return
	}
	var kept []string
	for _, v := range vs {
		for e := range strings.SplitSeq(v, ",") {
			name, _, _ := strings.Cut(e, ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "identity" || codings[name] != nil {
				kept = append(kept, strings.TrimSpace(e))
			}
		}
	}
	if len(kept) == 0 {
		h.Del("Accept-Encoding")
		return
	}
	h.Set("Accept-Encoding", strings.Join(kept, ", "))
}

// decoder decodes one answer's body for sink. Its fields other than the
// channels are the decoding goroutine's, read by the writer after close.
type decoder struct {
	in   chan []byte   // the next encoded bytes; closed at the answer's end
	idle chan struct{} // the goroutine has decoded all it was given
	done chan struct{} // the goroutine has ended
	sink func([]byte)

	buf      []byte // encoded bytes received; buf[off:] not yet read by the decoders
	off      int
	started  bool  // the first bytes were received
	closed   bool  // in is closed
	encoded  int64 // encoded bytes received
	decoded  int64 // decoded bytes handed to sink
	capped   bool  // decoding stopped at the inflation bound
	err      error // why decoding failed, nil if it did not
	finished bool  // the encoded stream ended, or decoding failed
}

// newDecoder starts decoding an answer encoded with cs (in the order
// applied) for sink, which is called on the decoding goroutine while a
// write waits.
func newDecoder(cs []string, sink func([]byte)) *decoder {
	d := &decoder{in: make(chan []byte), idle: make(chan struct{}), done: make(chan struct{}), sink: sink}
	go d.run(cs)
	return d
}

// write hands b to the decoder and returns once everything it decodes to
// has reached sink.
func (d *decoder) write(b []byte) {
	if len(b) == 0 {
		return
	}
	d.in <- b
	<-d.idle
}

// close tells the decoder that the answer ended, and waits for it to
// decode what is left (within the bound).
func (d *decoder) close() {
	close(d.in)
	<-d.done
}

func (d *decoder) run(cs []string) {
	defer close(d.done)
	d.decode(cs)
	for d.more() { // the rest of the answer passes by
		d.buf, d.off = d.buf[:0], 0
	}
}

// decode decodes the answer, encoded with cs, for sink until it ends, the
// bound stops it, or it fails to decode.
func (d *decoder) decode(cs []string) {
	defer func() {
		if p := recover(); p != nil { // a decoder's bug on a hostile answer fails this answer, not the process
			d.fail(cs, fmt.Errorf("panic: %v", p))
		}
	}()
	var r io.Reader = d
	for i := len(cs) - 1; i >= 0; i-- {
		next, err := codings[cs[i]](r)
		if err != nil {
			d.fail(cs, err)
			return
		}
		if c, ok := next.(io.Closer); ok {
			defer c.Close()
		}
		r = next
	}
	out := make([]byte, 32<<10)
	for !d.finished {
		room := maxInflation*d.encoded + inflationSlack - d.decoded
		if room <= 0 {
			if !d.more() {
				d.capped = true
				return
			}
			continue
		}
		n, err := r.Read(out[:min(int64(len(out)), room)])
		if n > 0 {
			d.decoded += int64(n)
			d.sink(out[:n])
		}
		switch {
		case err == io.EOF:
			d.finished = true // whatever follows the encoded stream is not looked at
		case err != nil:
			d.fail(cs, err)
		}
	}
}

func (d *decoder) fail(cs []string, err error) {
	d.err, d.finished = fmt.Errorf("content-encoding %s: %w", strings.Join(cs, ", "), err), true
}

// Read gives the decoders the encoded bytes received, waiting for the
// next write when there are none.
func (d *decoder) Read(p []byte) (int, error) {
	for d.off == len(d.buf) {
		if !d.more() {
			return 0, io.EOF
		}
	}
	n := copy(p, d.buf[d.off:])
	d.off += n
	return n, nil
}

// more tells the waiting write that all it gave was decoded, and waits
// for the next; it reports false once the answer has ended.
func (d *decoder) more() bool {
	if d.closed {
		return false
	}
	if d.started {
		d.idle <- struct{}{}
	}
	d.started = true
	b, ok := <-d.in
	if !ok {
		d.closed = true
		return false
	}
	d.encoded += int64(len(b))
	d.buf = append(d.buf[:copy(d.buf, d.buf[d.off:])], b...)
	d.off = 0
	return true
}
