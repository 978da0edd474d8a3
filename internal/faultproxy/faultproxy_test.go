package faultproxy

import (
	"bufio"
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
