// Package faultproxy is a TCP proxy for tests that puts faults between a
// client and a real server: latency each way, stalls (bytes held, as a
// black hole that accepted the connection and never answers), refused
// connections, resets of every open connection, and new connections sent
// to another server. Faults change while
// traffic flows; the proxy keeps order within a connection.
package faultproxy

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards connections from Addr to a target address.
type Proxy struct {
	Addr   string
	target string
	ln     net.Listener

	mu      sync.Mutex
	cond    *sync.Cond // signalled when stalled turns false, pending changes or the proxy closes
	pending int        // chunks read and not yet delivered or dropped
	latency time.Duration
	stalled bool
	refuse  bool
	closed  bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
	dialled func() // called once the server is dialled for a new connection; nil but in tests
}

// Start listens on a free loopback port and forwards to target until the
// test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	return start(t, target, nil)
}

func start(t testing.TB, target string, dialled func()) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}, dialled: dialled}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// SetLatency delays every byte by d in each direction (d each way, 2d a
// round trip), from now on.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Stall holds every byte in both directions while on: the server looks
// hung (a black hole) to its clients. Held bytes flow again when it is
// turned off.
func (p *Proxy) Stall(on bool) {
	p.mu.Lock()
	p.stalled = on
	p.mu.Unlock()
	p.cond.Broadcast()
}

// Refuse resets new connections at once while on, as a server that is
// down does.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Retarget sends new connections to target; the open ones stay with the
// server they reached, as when a DNS name a client dials is moved to
// another server (a managed Redis's primary endpoint after a failover).
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Reset resets every open connection (an RST to both sides).
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		reset(c)
		delete(p.conns, c)
	}
}

// Down refuses new connections and resets the open ones: the server died.
func (p *Proxy) Down() {
	p.Refuse(true)
	p.Reset()
}

// Up undoes Down, Stall and SetLatency.
func (p *Proxy) Up() {
	p.mu.Lock()
	p.refuse, p.stalled, p.latency = false, false, 0
	p.mu.Unlock()
	p.cond.Broadcast()
}

// Drain returns once every byte the proxy has read so far, either way,
// has been written to the other side or dropped with its connection:
// after SetLatency(0), a test knows that what its client sent earlier has
// reached the server. It waits while stalled.
func (p *Proxy) Drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.pending > 0 && !p.closed {
		p.cond.Wait()
	}
}

// held counts a chunk read, and done one delivered or dropped.
func (p *Proxy) held() { p.addPending(1) }
func (p *Proxy) done() { p.addPending(-1) }

func (p *Proxy) addPending(n int) {
	p.mu.Lock()
	p.pending += n
	p.mu.Unlock()
	p.cond.Broadcast()
}

// Close stops the proxy and closes every connection, and returns when
// all its goroutines have.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.cond.Broadcast()
	p.wg.Wait()
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse, target := p.refuse || p.closed, p.target
		p.mu.Unlock()
		if refuse {
			reset(c)
			continue
		}
		s, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			reset(c)
			continue
		}
		if p.dialled != nil {
			p.dialled()
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		if p.refuse {
			// Down came while the server was dialled: its Reset did not
			// see this connection, so it goes as the open ones did.
			p.mu.Unlock()
			reset(c)
			reset(s)
			continue
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// chunk is bytes read from one side, due at the other at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies from src to dst through the faults: a reader stamps each
// chunk with its due time and a writer delivers it then, unless stalled.
func (p *Proxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	q := make(chan chunk, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if !p.wait(c.due) {
				p.done()
				break
			}
			_, err := dst.Write(c.b)
			p.done()
			if err != nil {
				break
			}
		}
		for range q { // drain so the reader never blocks
			p.done()
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			due := time.Now().Add(p.latency)
			p.mu.Unlock()
			p.held()
			q <- chunk{b: append([]byte(nil), buf[:n]...), due: due}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
	// One side ended: end the other, as a proxy does.
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	p.mu.Lock()
	delete(p.conns, src)
	p.mu.Unlock()
	src.Close()
	dst.SetReadDeadline(time.Now()) // and the other direction's reader
}

// wait sleeps until due and while stalled; it reports false once the proxy
// is closed.
func (p *Proxy) wait(due time.Time) bool {
	if d := time.Until(due); d > 0 {
		time.Sleep(d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.stalled && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}
