//go:build e2e

package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/freeport"
	"github.com/sluicehq/sluice/internal/redistest"
)

// writeConfig writes a policy file and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// readyz returns /readyz's status and body.
func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// hammerHTTP sends callers × each checks of policy's key "hot" at once,
// to the instances in turn, and returns how many were allowed and how many
// answers were not a decision of the store.
func hammerHTTP(t *testing.T, procs []*proc, policy string, callers, each int) (allowed, odd int64) {
	t.Helper()
	var a, o atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range each {
				p := procs[(g+i)%len(procs)]
				body := fmt.Sprintf(`{"checks":[{"policy":%q,"key":"hot"}]}`, policy)
				resp, err := http.Post("http://"+p.http+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					o.Add(1)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var r checkResp
				switch {
				case resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil || len(r.Results) != 1 || r.Results[0].FailedOpen || strings.Contains(string(b), `"local":true`):
					o.Add(1)
				case r.Allowed:
					a.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return a.Load(), o.Load()
}

// lines counts the log lines of out that contain s.
func lines(out, s string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// The ACL docs/operations.md gives, applied as written: every preflight
// check ok, two instances as that user exact under 64 callers, and an
// override applied by both at once.
func TestRedisRequirementsACL(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	acl := regexp.MustCompile(`(?m)^ACL SETUSER sluice .*$`).FindString(string(doc))
	if acl == "" {
		t.Fatal("docs/operations.md has no ACL SETUSER sluice line")
	}
	srv := redistest.StandaloneWith(t)
	srv.Do(strings.Fields(strings.ReplaceAll(acl, "CHANGE-ME", "pw"))...)
	const policies = `
policies:
  - name: api
    limit: fixed_window 1000/1m
`
	// One instance has the password in its URL, the other in a file.
	password := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(password, []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var procs []*proc
	for _, store := range []string{
		`store: {type: redis, url: "redis://sluice:pw@` + srv.Addr + `"}`,
		`store: {type: redis, url: "redis://sluice@` + srv.Addr + `", password_file: "` + password + `"}`,
	} {
		procs = append(procs, start(t, []string{"SLUICE_ADMIN_TOKEN=t0ken"}, "-config", writeConfig(t, store+policies)))
	}
	for i, p := range procs {
		if n := lines(p.out.String(), "redis preflight: "); n != 4 || strings.Contains(p.out.String(), "level=WARN") {
			t.Errorf("instance %d: %d preflight lines, or a warning:\n%s", i, n, p.out)
		}
		for _, check := range []string{"decide", "eviction", "persistence", "commands"} {
			if v := metric(t, p.http, `sluice_store_preflight{check="`+check+`",result="ok"}`); v != 1 {
				t.Errorf("instance %d: preflight %s not ok", i, check)
			}
		}
	}
	redistest.WindowAhead(time.Minute, 20*time.Second) // fixed_window: one minute's count
	if allowed, odd := hammerHTTP(t, procs, "api", 64, 25); allowed != 1000 || odd != 0 {
		t.Errorf("admitted %d of 1600 on fixed_window 1000/1m (%d answers not the store's); want exactly 1000", allowed, odd)
	}
	code, body := adminCall(t, procs[0].admin, "t0ken", "PUT", "/admin/overrides", `{"policy":"api","key":"vip","limits":["fixed_window 7/1h"]}`)
	if code != 200 || !strings.Contains(body, `"instances":2,"applied_by":2`) {
		t.Errorf("PUT override as the documented user: %d %s; want applied by 2 of 2", code, body)
	}
	// Only what the docs leave out: CONFIG GET, for the preflight's save.
	if log := srv.Do("ACL", "LOG"); strings.Count(log, "\nusername\nsluice\n") != strings.Count(log, "\nobject\nconfig|get\n") {
		t.Errorf("Redis refused the documented user something:\n%s", log)
	}
}

// A user that may run neither FCALL nor EVALSHA: sluice serve refuses to
// start, saying why and what to change; with store.fail_mode set, it
// starts with a warning, decides by that mode, and /readyz answers 503.
func TestServeRefusesUserWithoutScripting(t *testing.T) {
	needBinary(t)
	redistest.HourAhead()
	srv := redistest.StandaloneWith(t)
	srv.Do("ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-@scripting")
	store := "policies: [{name: api, limit: fixed_window 5/1h}]\nstore: {type: redis, url: \"redis://app:pw@" + srv.Addr + "\""
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "serve", "-config", writeConfig(t, store+"}\n"), "-http", freeport.Addr(t), "-grpc", freeport.Addr(t)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `Redis user "app" may not run sluice's decision`) || !strings.Contains(string(out), "store.fail_mode") {
		t.Fatalf("serve as a user without scripting: %v\n%s\nwant a refusal to start naming the user and store.fail_mode", err, out)
	}
	p := start(t, nil, "-config", writeConfig(t, store+", fail_mode: local}\n"))
	if !strings.Contains(p.out.String(), "level=WARN") || !strings.Contains(p.out.String(), "every check is decided by store.fail_mode") {
		t.Errorf("started with fail_mode local, but no warning:\n%s", p.out)
	}
	if code, body := readyz(t, p.http); code != 503 || !strings.Contains(body, "refuses sluice's decision") {
		t.Errorf("/readyz: %d %q; want 503 saying the store refuses the decision", code, body)
	}
	if code, r := postCheck(t, p.http, "api", "alice"); code != 200 || !r.Allowed {
		t.Errorf("a check with fail_mode local: %d %+v; want decided locally", code, r)
	}
}

// aclDenials is the number of times srv refused something to user for
// reason (command, key, channel), from ACL LOG.
func aclDenials(srv *redistest.Server, user, reason string) int {
	n := 0
	for _, e := range strings.Split(srv.Do("ACL", "LOG"), "count\n")[1:] {
		f := strings.Split(e, "\n")
		if strings.Contains(e, "\nreason\n"+reason+"\n") && strings.Contains(e, "\nusername\n"+user+"\n") {
			c, _ := strconv.Atoi(strings.TrimSpace(f[0]))
			n += c
		}
	}
	return n
}

// A user refused every channel (Redis 7's default for a new user): one
// WARN line for the subscription, none more while it is refused at each
// retry; the preflight says which commands; overrides still work, by
// reload.
func TestServeUserWithoutChannels(t *testing.T) {
	redistest.HourAhead()
	srv := redistest.StandaloneWith(t)
	srv.Do("ACL", "SETUSER", "app", "on", ">pw", "~*", "resetchannels", "+@all")
	file := writeConfig(t, `store: {type: redis, url: "redis://app:pw@`+srv.Addr+`"}
policies:
  - name: api
    limit: fixed_window 2/1h
`)
	p := start(t, []string{"SLUICE_ADMIN_TOKEN=t0ken"}, "-config", file)
	// Five refusals: the first and four retries, 3 s of backoff.
	waitFor(t, func() bool { return aclDenials(srv, "app", "channel") >= 5 })
	const line = "may not subscribe to sluice's channel"
	if n := lines(p.out.String(), line); n != 1 {
		t.Errorf("%d lines saying %q after 5 refusals; want 1:\n%s", n, line, p.out)
	}
	if v := metric(t, p.http, `sluice_store_preflight{check="commands",result="warn"}`); v != 1 || !strings.Contains(p.out.String(), "SUBSCRIBE sluice:{overrides}:changes") {
		t.Errorf("the preflight did not warn of SUBSCRIBE:\n%s", p.out)
	}
	code, body := adminCall(t, p.admin, "t0ken", "PUT", "/admin/overrides", `{"policy":"api","key":"vip","limits":["fixed_window 7/1h"]}`)
	if code != 200 || !strings.Contains(body, `"instances":0`) {
		t.Fatalf("PUT override without channels: %d %s; want 200, no instance subscribed", code, body)
	}
	if _, r := postCheck(t, p.http, "api", "vip"); r.Results[0].Limit != "fixed_window 7/h" {
		t.Errorf("the next check after the override: %+v", r)
	}
}

// An evicting policy (allkeys-lru, and volatile-lru, which takes sluice's
// keys first since every one has a TTL): a WARN line at start naming it,
// and /readyz says so; a policy changed while sluice runs is found at the
// next connection.
func TestServeWarnsOnEvictingRedis(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "volatile-lru"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.StandaloneWith(t, "--maxmemory", "2mb", "--maxmemory-policy", policy)
			p := start(t, nil, "-redis", srv.URL())
			if !strings.Contains(p.out.String(), `level=WARN msg="redis preflight: eviction warn"`) || !strings.Contains(p.out.String(), "maxmemory-policy "+policy) {
				t.Errorf("no warning naming %s:\n%s", policy, p.out)
			}
			if code, body := readyz(t, p.http); code != 200 || !strings.Contains(body, "warning: eviction: warn: maxmemory-policy "+policy) {
				t.Errorf("/readyz: %d %q; want 200 with the eviction warning", code, body)
			}
			if v := metric(t, p.http, `sluice_store_preflight{check="eviction",result="warn"}`); v != 1 {
				t.Errorf("sluice_store_preflight{eviction,warn} = %v", v)
			}
		})
	}
	t.Run("changed while running", func(t *testing.T) {
		srv := redistest.StandaloneWith(t)
		p := start(t, nil, "-redis", srv.URL())
		if strings.Contains(p.out.String(), "level=WARN") {
			t.Fatalf("a warning on a noeviction Redis:\n%s", p.out)
		}
		srv.Do("CONFIG", "SET", "maxmemory", "64mb")
		srv.Do("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
		srv.Do("CLIENT", "KILL", "TYPE", "pubsub") // the overrides' subscription reconnects
		waitFor(t, func() bool { return strings.Contains(p.out.String(), "maxmemory-policy allkeys-lfu") })
		waitFor(t, func() bool {
			_, body := readyz(t, p.http)
			return strings.Contains(body, "warning: eviction")
		})
	})
}

// A full Redis with noeviction refuses writes: checks are decided by their
// fail_mode and each failure is logged, and no count is reset: once Redis
// has room again, the key has what it had left.
func TestServeFullRedisFailsByFailMode(t *testing.T) {
	redistest.HourAhead()
	srv := redistest.StandaloneWith(t, "--maxmemory", "8mb", "--maxmemory-policy", "noeviction")
	file := writeConfig(t, `store: {type: redis, url: "`+srv.URL()+`"}
policies:
  - name: login
    limit: fixed_window 5/1h
    fail_mode: closed
  - name: search
    limit: fixed_window 5/1h
    fail_mode: open
`)
	p := start(t, nil, "-config", file)
	for range 3 {
		if _, r := postCheck(t, p.http, "login", "alice"); !r.Allowed {
			t.Fatalf("a check before Redis is full: %+v", r)
		}
	}
	srv.Do("DEBUG", "POPULATE", "200000", "junk", "64") // past maxmemory
	if code, r := postCheck(t, p.http, "login", "alice"); code == 200 && r.Allowed {
		t.Errorf("fail_mode closed on a full Redis: %d %+v; want refused", code, r)
	}
	if _, r := postCheck(t, p.http, "search", "bob"); !r.Allowed || !r.Results[0].FailedOpen {
		t.Errorf("fail_mode open on a full Redis: %+v; want allowed, failed open", r)
	}
	waitFor(t, func() bool { return strings.Contains(p.out.String(), "OOM") })
	// The breaker opens on the failures: /readyz answers 503 on Redis too.
	waitFor(t, func() bool {
		postCheck(t, p.http, "login", "carol")
		code, body := readyz(t, p.http)
		return code == 503 && strings.Contains(body, "breaker open")
	})
	if v := metric(t, p.http, `sluice_checks_total{domain="",policy="login",result="failed_closed"}`); v < 1 {
		t.Errorf("failed_closed checks counted: %v", v)
	}
	srv.Do("CONFIG", "SET", "maxmemory", "0")
	// The breaker lets a probe through within its cool-down; then the key
	// has 5 - 3 - 1 = 1 left: the refused checks took nothing, and the
	// three before the outage are still counted.
	var r checkResp
	waitFor(t, func() bool {
		_, r = postCheck(t, p.http, "login", "alice")
		return r.Allowed && !r.Results[0].FailedOpen
	})
	if r.Results[0].Remaining != 1 {
		t.Errorf("after Redis has room again: remaining %d; want 1 (3 used before, this one)", r.Results[0].Remaining)
	}
}

// tls-auth-clients yes with a client certificate: 64 callers on
// fixed_window 1000/1m through sluice serve, exactly 1,000 admitted, all
// decided by Redis; the files given as store.tls fields (one with a name
// the server's certificate lacks, and skip_hostname_verification), or as
// the URL's parameters in SLUICE_REDIS.
func TestServeTLSClientCertificate(t *testing.T) {
	certs := redistest.NewCerts(t)
	srv := redistest.StandaloneTLS(t, certs)
	policies := "policies:\n  - name: api\n    limit: fixed_window 1000/1m\n"
	q := url.Values{"tls_ca_file": {certs.CA}, "tls_cert_file": {certs.ClientCert}, "tls_key_file": {certs.ClientKey}}
	for name, run := range map[string]func() *proc{
		"store.tls": func() *proc {
			return start(t, nil, "-config", writeConfig(t, fmt.Sprintf("store:\n  type: redis\n  url: rediss://%s\n  prefix: \"tls-fields:\"\n  tls: {ca_file: %q, cert_file: %q, key_file: %q}\n%s",
				srv.Addr, certs.CA, certs.ClientCert, certs.ClientKey, policies)))
		},
		"store.tls, a name the certificate lacks, not checked": func() *proc {
			return start(t, nil, "-config", writeConfig(t, fmt.Sprintf("store:\n  type: redis\n  url: rediss://%s\n  prefix: \"tls-skip:\"\n  tls: {ca_file: %q, cert_file: %q, key_file: %q, server_name: redis.elsewhere.example, skip_hostname_verification: true}\n%s",
				srv.Addr, certs.CA, certs.ClientCert, certs.ClientKey, policies)))
		},
		"URL parameters": func() *proc {
			return start(t, []string{"SLUICE_REDIS=rediss://" + srv.Addr + "?" + q.Encode()}, "-config", writeConfig(t, policies))
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := run()
			redistest.WindowAhead(time.Minute, 20*time.Second)
			if allowed, odd := hammerHTTP(t, []*proc{p}, "api", 64, 25); allowed != 1000 || odd != 0 {
				t.Errorf("admitted %d of 1600 on fixed_window 1000/1m (%d answers not the store's); want exactly 1000", allowed, odd)
			}
			if v := metric(t, p.http, "sluice_store_failed_checks_total"); v != 0 {
				t.Errorf("%v checks decided without Redis", v)
			}
		})
	}
}
