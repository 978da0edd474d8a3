package server

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// The gRPC listener's guard against HTTP/2 rapid reset (CVE-2023-44487):
// a client that opens streams and resets them at once makes the server
// start and abandon a call for each, at no cost to itself. grpc-go bounds
// the calls running at once (MaxConcurrentStreams) but neither counts
// resets nor closes such a connection, so the guard does, beneath it.
//
// A guardConn reads the frame headers of what the client sends, as grpc-go
// reads it: after the 24-byte client preface, each frame is a 9-byte
// header (length 24 bits, type, flags, stream ID) and its payload. It
// counts RST_STREAM frames in a bucket of resetBurst refilled at
// resetRate a second. A connection that empties it is sent a GOAWAY
// (ENHANCE_YOUR_CALM, "too_many_resets") and closed: the GOAWAY is written
// between two of the server's own frames, which the guard finds by
// reading the frame headers of what grpc-go writes; then the connection's
// input is drained for up to goAwayLinger, so that the client reads the
// GOAWAY before the close, and closed.
//
// A client that cancels calls as clients do (a timeout now and then, even
// Envoy's 20 ms rate limit timeout against a slow service at a thousand
// calls a second) stays far under the bucket; the attack resets tens of
// thousands of streams a second.
const (
	resetBurst   = 2000
	resetRate    = 1000 // per second
	goAwayLinger = time.Second
)

// guardListener wraps accepted connections in guardConns; onGoAway, if set,
// is called once for each connection sent a GOAWAY.
type guardListener struct {
	net.Listener
	onGoAway func()
}

func (l *guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &guardConn{Conn: c, in: frameReader{preface: len(http2.ClientPreface)}, tokens: resetBurst, last: time.Now(), onGoAway: l.onGoAway}, nil
}

// frameReader follows a byte stream of HTTP/2 frames.
type frameReader struct {
	preface int // bytes of the client preface still to skip
	hdr     [9]byte
	n       int // bytes of hdr read
	payload int // bytes of the current frame's payload still to skip
}

// next consumes b and calls frame with each complete frame header's type
// and stream ID.
func (f *frameReader) next(b []byte, frame func(typ http2.FrameType, stream uint32)) {
	for len(b) > 0 {
		switch {
		case f.preface > 0:
			k := min(f.preface, len(b))
			f.preface, b = f.preface-k, b[k:]
		case f.payload > 0:
			k := min(f.payload, len(b))
			f.payload, b = f.payload-k, b[k:]
		default:
			k := copy(f.hdr[f.n:], b)
			f.n, b = f.n+k, b[k:]
			if f.n < len(f.hdr) {
				return
			}
			f.n = 0
			f.payload = int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
			frame(http2.FrameType(f.hdr[3]), binary.BigEndian.Uint32(f.hdr[5:])&(1<<31-1))
		}
	}
}

// boundary reports whether the stream is between two frames.
func (f *frameReader) boundary() bool { return f.preface == 0 && f.payload == 0 && f.n == 0 }

// guardConn is a gRPC connection under the guard. Read is called by
// grpc-go's one reader goroutine, Write under mu.
type guardConn struct {
	net.Conn
	onGoAway func()

	// The reader's.
	in         frameReader
	lastStream uint32 // the highest stream the client opened
	tokens     float64
	last       time.Time

	deadline sync.Once // the close within goAwayLinger, once a GOAWAY is due

	mu      sync.Mutex
	out     frameReader // what the server has written
	pending bool        // a GOAWAY is to be written at the next boundary
	sent    atomic.Bool // the GOAWAY is written: further writes are dropped
}

func (c *guardConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	over := false
	c.in.next(p[:n], func(typ http2.FrameType, stream uint32) {
		switch typ {
		case http2.FrameHeaders:
			c.lastStream = max(c.lastStream, stream)
		case http2.FrameRSTStream:
			now := time.Now()
			c.tokens = min(resetBurst, c.tokens+now.Sub(c.last).Seconds()*resetRate) - 1
			c.last = now
			over = over || c.tokens < 0
		}
	})
	if over {
		c.goAway()
	}
	if c.sent.Load() {
		return 0, io.EOF // grpc-go stops reading and closes the connection
	}
	return n, err
}

// goAway writes the GOAWAY now, if the server's output is between frames,
// or else after the frame being written; either way the connection is
// closed within goAwayLinger.
func (c *guardConn) goAway() {
	c.deadline.Do(func() { time.AfterFunc(goAwayLinger, func() { c.Conn.Close() }) })
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending || c.sent.Load() {
		return
	}
	c.pending = true
	if c.out.boundary() {
		c.writeGoAway()
	}
}

// writeGoAway writes the GOAWAY and shuts the connection's output. The
// caller holds c.mu, at a frame boundary. The GOAWAY is counted before it
// is written, so that a peer that has read it finds it counted.
func (c *guardConn) writeGoAway() {
	c.pending = false
	c.sent.Store(true)
	if c.onGoAway != nil {
		c.onGoAway()
	}
	c.Conn.SetWriteDeadline(time.Now().Add(goAwayLinger))
	http2.NewFramer(c.Conn, nil).WriteGoAway(c.lastStream, http2.ErrCodeEnhanceYourCalm, []byte("too_many_resets"))
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

func (c *guardConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sent.Load() {
		return len(p), nil // the connection is going: grpc-go's last words are dropped
	}
	// Write frame by frame while a GOAWAY waits, so that it goes at the
	// first boundary.
	written := 0
	for len(p) > 0 {
		chunk := p
		if c.pending {
			chunk = p[:c.toBoundary(p)]
		}
		n, err := c.Conn.Write(chunk)
		c.out.next(chunk[:n], func(http2.FrameType, uint32) {})
		written += n
		if err != nil {
			return written, err
		}
		p = p[n:]
		if c.pending && c.out.boundary() {
			c.writeGoAway()
			return written + len(p), nil
		}
	}
	return written, nil
}

// toBoundary returns how many bytes of p finish the frame being written
// (at least one, so that a header is made of progress).
func (c *guardConn) toBoundary(p []byte) int {
	f := c.out
	if f.boundary() {
		return min(len(p), 1)
	}
	k := 0
	for k < len(p) && !f.boundary() {
		if f.payload > 0 {
			step := min(f.payload, len(p)-k)
			f.payload -= step
			k += step
			continue
		}
		f.next(p[k:k+1], func(http2.FrameType, uint32) {})
		k++
	}
	return k
}

// Close closes the connection; one sent a GOAWAY is first drained for up
// to goAwayLinger, so that the client reads the GOAWAY instead of a reset.
func (c *guardConn) Close() error {
	if !c.sent.Load() {
		return c.Conn.Close()
	}
	go func() {
		c.Conn.SetReadDeadline(time.Now().Add(goAwayLinger))
		io.Copy(io.Discard, c.Conn)
		c.Conn.Close()
	}()
	return nil
}
