//go:build e2e

package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// Two proxies on a 3-master Cluster, a request limited per API key and
// per client address (keys of two slots, one batch): the client's limit
// admits exactly its rate across both proxies, every request decided by
// Redis; a fail_mode closed policy is answered by Redis too, never 503.
func TestTwoProxiesOnCluster(t *testing.T) {
	redistest.HourAhead()
	nodes := redistest.Cluster(t)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	yaml := `
policies:
  - {name: per-key, limit: fixed_window 1000/1h, key: "header:X-API-Key", match: "/api/"}
  - {name: per-ip, limit: fixed_window 30/1h, key: client_ip, match: "/api/"}
  - {name: login, limit: fixed_window 5/1h, key: "client_ip+header:X-User", match: "POST /login", fail_mode: closed}
`
	var proxies []string
	for range 2 {
		store, err := redisstore.Open("redis://"+strings.Join(addrs, ","), redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		proxies = append(proxies, addrOf(t, gateway(t, yaml, store).URL))
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Go(func() {
			for i := range 5 {
				code, _ := rawGet(t, proxies[(c+i)%2], "/api/x", "example.com", "X-API-Key", fmt.Sprint("key-", c%5))
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if codes[200] != 30 || codes[429] != 50 {
		t.Fatalf("80 requests on a per-address limit of 30 through two proxies: %v; want 30 × 200, 50 × 429", codes)
	}
	login := map[int]int{}
	for i := range 8 {
		c, err := net.Dial("tcp", proxies[i%2])
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /login HTTP/1.1\r\nHost: example.com\r\nX-User: alice\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		c.Close()
		login[resp.StatusCode]++
	}
	if login[200] != 5 || login[429] != 3 {
		t.Fatalf("8 logins on 5/1h: %v; want 5 × 200, 3 × 429 (decided by Redis)", login)
	}
}
