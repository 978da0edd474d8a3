package server

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// No client can hold a connection open: with default settings 100 slow
// headers (slowloris) and 100 slow bodies are closed by the server within
// 40 s, and 100 idle keep-alives once idle for listeners.idle_timeout
// (20 s here: its default, 3m, outlasts the gateways' own), while a
// well-behaved client keeps getting answers.
func TestSlowClientsAreCut(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the server's timeouts")
	}
	t.Parallel()
	r := start(t, "listeners: {idle_timeout: 20s}\npolicies: [{name: p, limit: 1000000/1h}]", "")
	addr := r.Addrs().HTTP
	var closed atomic.Int64
	var wg sync.WaitGroup
	hold := func(send func(c net.Conn, w *bufio.Writer)) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		wg.Go(func() {
			defer c.Close()
			w := bufio.NewWriter(c)
			send(c, w)
			c.SetReadDeadline(time.Now().Add(45 * time.Second))
			buf := make([]byte, 4096)
			for {
				if _, err := c.Read(buf); err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						return // still open at 45 s: not counted as closed
					}
					closed.Add(1)
					return
				}
			}
		})
	}
	const body = `{"checks":[{"policy":"p","key":"k"}]}`
	start := time.Now()
	for range 100 {
		hold(func(c net.Conn, w *bufio.Writer) { // slowloris: headers never end
			fmt.Fprintf(w, "POST /v1/check HTTP/1.1\r\nHost: x\r\n")
			w.Flush()
		})
		hold(func(c net.Conn, w *bufio.Writer) { // a body that never comes
			fmt.Fprintf(w, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body)+10, body[:5])
			w.Flush()
		})
		hold(func(c net.Conn, w *bufio.Writer) { // one request, then idle
			fmt.Fprintf(w, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			w.Flush()
		})
	}
	// A well-behaved client is answered throughout.
	good := 0
	for time.Since(start) < 40*time.Second && closed.Load() < 300 {
		if res, code := r.check(t, "p", "good"); code != 200 || !res.Allowed {
			t.Fatalf("a well-behaved client: %d %+v", code, res)
		}
		good++
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(start)
	if n := closed.Load(); n != 300 {
		t.Fatalf("%d of 300 slow or idle connections closed within %v", n, took.Round(time.Second))
	}
	t.Logf("300 slow or idle connections closed within %v; %d checks answered meanwhile", took.Round(time.Second), good)
	wg.Wait()
}
