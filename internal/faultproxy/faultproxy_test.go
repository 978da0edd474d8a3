package faultproxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echo starts a line echo server until the test ends.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	c.SetDeadline(start.Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	_, err := r.ReadString('\n')
	return time.Since(start), err
}

func TestFaults(t *testing.T) {
	p := Start(t, echo(t))
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := roundTrip(c, r, time.Second); err != nil {
		t.Fatalf("no fault: %v", err)
	}
	p.SetLatency(30 * time.Millisecond)
	if took, err := roundTrip(c, r, time.Second); err != nil || took < 60*time.Millisecond {
		t.Fatalf("30ms each way: round trip %v, %v; want at least 60ms", took, err)
	}
	p.SetLatency(0)
	p.Stall(true)
	if _, err := roundTrip(c, r, 100*time.Millisecond); err == nil {
		t.Fatal("stalled: the round trip completed")
	}
	p.Stall(false)
	// The stalled ping is delivered now; read its echo.
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("after the stall: %v", err)
	}
	p.Reset()
	if _, err := roundTrip(c, r, time.Second); err == nil {
		t.Fatal("after Reset: the connection still works")
	}
	p.Refuse(true)
	if c2, err := net.Dial("tcp", p.Addr); err == nil {
		c2.SetDeadline(time.Now().Add(time.Second))
		if _, err := bufio.NewReader(c2).ReadString('\n'); err == nil {
			t.Fatal("refusing: a new connection was served")
		}
		c2.Close()
	}
	p.Up()
	c3, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := roundTrip(c3, bufio.NewReader(c3), time.Second); err != nil {
		t.Fatalf("after Up: %v", err)
	}
}

// Drain returns once bytes held by latency are written to the server: the
// server can read them at once, and Drain waited for their due time.
func TestDrain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := Start(t, ln.Addr().String())
	p.SetLatency(100 * time.Millisecond)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sent := time.Now()
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	// Once the proxy holds the chunk, one Drain waits for it: the server
	// then reads it at once.
	p.mu.Lock()
	for p.pending == 0 {
		p.cond.Wait() // signalled when the proxy has read the chunk
	}
	p.mu.Unlock()
	p.Drain()
	buf := make([]byte, 5)
	s.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := io.ReadFull(s, buf); err != nil {
		t.Fatalf("after Drain the server could not read the bytes at once: %v", err)
	}
	if string(buf) != "held\n" {
		t.Fatalf("the server read %q", buf)
	}
	if waited := time.Since(sent); waited < 100*time.Millisecond {
		t.Fatalf("the bytes arrived after %v, before their latency of 100ms", waited)
	}
	p.SetLatency(0)
	p.Drain() // nothing pending: returns at once
}

// A connection whose server is being dialled when Down comes goes down
// with the open ones: none survives the outage.
func TestDownWhileDialling(t *testing.T) {
	dialling, proceed := make(chan struct{}), make(chan struct{})
	p := start(t, echo(t), func() {
		close(dialling)
		<-proceed
	})
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-dialling
	p.Down()
	close(proceed)
	c.Write([]byte("ping\n"))
	if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
		t.Fatalf("a connection made during Down answered %q", line)
	}
}
