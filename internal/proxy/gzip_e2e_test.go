//go:build e2e

package proxy

import (
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/freeport"
	"github.com/sluicehq/sluice/memstore"
)

// nginxGzip starts a real nginx with gzip on that answers every request
// with answer as JSON, and returns its URL.
func nginxGzip(t *testing.T, answer string) *url.URL {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		t.Skip("nginx not on PATH")
	}
	dir := t.TempDir()
	addr := freeport.Addr(t)
	conf := fmt.Sprintf(`daemon off;
master_process off;
error_log %[1]s/error.log;
pid %[1]s/nginx.pid;
events {}
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  gzip on;
  gzip_types application/json;
  gzip_min_length 0;
  gzip_proxied any;
  server {
    listen %[2]s;
    location / {
      default_type application/json;
      return 200 '%[3]s';
    }
  }
}
`, dir, addr, answer)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nginx did not listen within 30 s")
		}
		time.Sleep(10 * time.Millisecond) // polling for nginx's listener, not ordering the test
	}
	return &url.URL{Scheme: "http", Host: addr}
}

// Behind sluice proxy, an upstream nginx with gzip on answers a client
// that accepts gzip in gzip; the proxy charges the tokens in it: 4
// answers of 3000 on 10000, the 5th refused.
func TestProxyChargesNginxGzippedAnswers(t *testing.T) {
	answer := `{"id":"c1","choices":[{"message":{"content":"` + strings.Repeat("hello ", 200) + `"}}],"usage":{"total_tokens":3000}}`
	settled := make(chan [2]int64, 8)
	srv := gatewayURL(t, tokensYAML, memstore.New(memstore.Options{}), nginxGzip(t, answer), Deps{Accounting: tally{
		settled: func(_ string, estimate, actual int64, _ bool) { settled <- [2]int64{estimate, actual} },
	}})
	ask := func() *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Authorization", "Bearer nginx")
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == 200 {
			z, err := gzip.NewReader(resp.Body)
			if err != nil {
				t.Fatalf("the answer is not gzip: %v", err)
			}
			if b, _ := io.ReadAll(z); string(b) != answer {
				t.Fatalf("decoded answer %q", b)
			}
		}
		return resp
	}
	for i := range 4 {
		if resp := ask(); resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("request %d: %d, Content-Encoding %q; want 200, gzip", i+1, resp.StatusCode, resp.Header.Get("Content-Encoding"))
		}
		if s := <-settled; s != [2]int64{500, 3000} {
			t.Fatalf("request %d settled %v; want 500 to 3000", i+1, s)
		}
	}
	if resp := ask(); resp.StatusCode != 429 {
		t.Fatalf("request 5: %d; want 429", resp.StatusCode)
	}
}
