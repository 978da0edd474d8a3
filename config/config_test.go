package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/memstore"
)

func TestDefaultParses(t *testing.T) {
	c := config.Default()
	if c.Store.Type() != "memory" || len(c.Policies) != 3 || c.Domains["edge"] == nil {
		t.Fatalf("default: %+v", c)
	}
	api := c.Policy("api")
	if len(api.Limits) != 2 || api.Limits[0].Rate != 10 || api.Limits[1].Period != time.Hour {
		t.Fatalf("api limits %v", api.Limits)
	}
	if c.Policy("login").FailMode != sluice.FailClosed || c.Policy("login").Limits[0].Algorithm != sluice.SlidingLog {
		t.Fatalf("login policy %+v", c.Policy("login"))
	}
}

// Every problem is reported at once, each with file:line:column and field.
func TestEveryProblemAtOnce(t *testing.T) {
	src := `store:
  type: etcd
  timeout: -1s
policies:
  - name: a
    limit: 0/s
  - name: a
    limits: ["10/s", "5/xyz"]
    key: header
    cost: 99
    colour: blue
  - limit: 10/s
    fail_mode: maybe
domains:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: fortnight, requests_per_unit: 5}
`
	_, err := config.Parse("p.yaml", []byte(src))
	var ps config.Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error %v is not Problems", err)
	}
	want := []string{
		"p.yaml:2:9: store.type:",
		"p.yaml:3:12: store.timeout: must be positive",
		"p.yaml:6:12: policies[0].limit:",
		"p.yaml:7:11: policies[1].name: policy \"a\" is defined twice",
		"p.yaml:8:22: policies[1].limits[1]:",
		"p.yaml:9:10: policies[1].key:",
		"p.yaml:10:11: policies[1].cost: 99 is outside",
		"p.yaml:11:5: policies[1].colour: unknown field",
		"p.yaml:12:5: policies[2].name: required",
		"p.yaml:13:16: policies[2].fail_mode:",
		"p.yaml:18:28: domains[0].descriptors[0].rate_limit.unit:",
	}
	text := err.Error()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("missing %q in:\n%s", w, text)
		}
	}
	if len(ps) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(ps), len(want), text)
	}
}

func TestBadFiles(t *testing.T) {
	for name, src := range map[string]string{
		"empty":        "",
		"not yaml":     "policies: [",
		"nothing":      "store: {type: memory}",
		"redis no url": "store: {type: redis}\npolicies: [{name: a, limit: 1/s}]",
		"dup domain":   "domains: [{domain: d, descriptors: []}, {domain: d, descriptors: []}]",
		"shape bucket": "policies: [{name: a, limit: 1/s, shape: true}]",
		"bad match":    "policies: [{name: a, limit: 1/s, match: \"GET /x/{\"}]",
		"bad zone":     "policies: [{name: a, limit: calendar 1/day tz=Moon/Base}]",
		"bad unit":     "policies: [{name: a, limit: {algorithm: calendar, rate: 5, unit: fortnight}}]",
		"zone map":     "policies: [{name: a, limit: {algorithm: calendar, rate: 5, unit: day, tz: Moon/Base}}]",
		"unit no cal":  "policies: [{name: a, limit: {rate: 5, period: 1s, unit: day}}]",
		"cost source":  "policies: [{name: a, limit: 100/1m, cost: {estimate: 5, from: body}}]",
		"cost no from": "policies: [{name: a, limit: 100/1m, cost: {estimate: 5}}]",
		"cost word":    "policies: [{name: a, limit: 100/1m, cost: lots}]",
		"estimate big": "policies: [{name: a, limit: 100/1m, cost: {estimate: 500, from: bytes}}]",
		"unread big":   "policies: [{name: a, limit: 100/1m, cost: {estimate: 5, from: bytes, unread: 500}}]",
		"unread < 0":   "policies: [{name: a, limit: 100/1m, cost: {estimate: 5, from: bytes, unread: -1}}]",
		"status 99":    "policies: [{name: a, limit: 100/1m, charge_status: [99]}]",
		"charge alone": "policies: [{name: a, concurrency: 5, charge_status: [401]}]",
	} {
		if _, err := config.Parse("f.yaml", []byte(src)); err == nil || !strings.HasPrefix(err.Error(), "f.yaml:") {
			t.Errorf("%s: %v; want a file:line error", name, err)
		}
	}
}

// A file holding one envoyproxy/ratelimit domain reads as that domain:
// nested descriptors, wildcards, unlimited, shadow_mode and replaces.
func TestEnvoyFormat(t *testing.T) {
	src := `domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: client_id
    descriptors:
      - key: path
        value: /api/*
        rate_limit:
          name: api
          unit: minute
          requests_per_unit: 100
      - key: path
        value: /api/bulk
        shadow_mode: true
        rate_limit:
          unit: hour
          requests_per_unit: 10
          replaces:
            - name: api
  - key: internal
    rate_limit:
      unlimited: true
`
	c, err := config.Parse("envoy.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domains["mongo_cps"]
	tests := []struct {
		entries []config.Entry
		rate    int64
		nilNode bool
	}{
		{[]config.Entry{{"database", "users"}}, 500, false},
		{[]config.Entry{{"database", "other"}}, 0, true},
		{[]config.Entry{{"client_id", "c1"}, {"path", "/api/x"}}, 100, false},
		{[]config.Entry{{"client_id", "c1"}, {"path", "/api/bulk"}}, 10, false},
		{[]config.Entry{{"client_id", "c1"}, {"path", "/other"}}, 0, true},
		{[]config.Entry{{"client_id", "c1"}}, 0, false},
	}
	for _, tt := range tests {
		n, _ := d.Match(tt.entries)
		if (n == nil) != tt.nilNode {
			t.Errorf("%v: node %v", tt.entries, n)
			continue
		}
		if n != nil && tt.rate != 0 && (len(n.Limits) != 1 || n.Limits[0].Rate != tt.rate) {
			t.Errorf("%v: limits %+v, want rate %d", tt.entries, n.Limits, tt.rate)
		}
	}
	bulk, _ := d.Match([]config.Entry{{"client_id", "c"}, {"path", "/api/bulk"}})
	if !bulk.Shadow || len(bulk.Replaces) != 1 || bulk.Replaces[0] != "api" {
		t.Errorf("bulk: %+v", bulk)
	}
	if n, _ := d.Match([]config.Entry{{"internal", "x"}}); !n.Unlimited {
		t.Error("internal is not unlimited")
	}
}

// unit_multiplier makes a limit's period that many units, as Envoy's
// RateLimitOverride has it: one fixed window of 10 minutes, not ten of
// one. Below 1, or past the longest period, it is refused at its field.
func TestEnvoyUnitMultiplier(t *testing.T) {
	c, err := config.Parse("envoy.yaml", []byte(`domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, unit_multiplier: 10, requests_per_unit: 100}
  - key: one
    rate_limit: {unit: minute, requests_per_unit: 100}
`))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := c.Domains["d"].Match([]config.Entry{{"k", "v"}})
	if l := n.Limits[0]; l.Limit.Period != 10*time.Minute || l.Units != 10 || l.Unit != "minute" || l.Limit.Rate != 100 {
		t.Fatalf("unit_multiplier 10: %+v, want 100 per 10m", l)
	}
	if n, _ := c.Domains["d"].Match([]config.Entry{{"one", "v"}}); n.Limits[0].Units != 1 || n.Limits[0].Limit.Period != time.Minute {
		t.Fatalf("no unit_multiplier: %+v, want 100 per 1m", n.Limits[0])
	}
	for src, want := range map[string]string{
		"{unit: second, unit_multiplier: 0, requests_per_unit: 1}":          "f.yaml:4:49: descriptors[0].rate_limit.unit_multiplier: 0: want 1 or more",
		"{unit: year, unit_multiplier: 101, requests_per_unit: 1}":          "f.yaml:4:47: descriptors[0].rate_limit.unit_multiplier: 101: a period past 876000h0m0s",
		"{unit: second, unit_multiplier: 3153600000, requests_per_unit: 1}": "",
	} {
		_, err := config.Parse("f.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: "+src+"\n"))
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s:\n got %v\nwant %q", src, err, want)
		}
	}
}

// Every store combination the server does not run is refused at the field
// that asks for it, with a message in the file's terms.
func TestStoreCombinationsRefused(t *testing.T) {
	const pol = "\npolicies: [{name: a, limit: 1/s}]\n"
	for _, tt := range []struct{ src, want string }{
		{"store:\n  type: memory\n  mode: local-sync", "f.yaml:3:9: store.mode: local-sync syncs local counts with a shared store: use type redis"},
		{"store:\n  type: redis\n  url: redis://x:1\n  mode: shard\n  peers: [a:1]", "f.yaml:4:9: store.mode: shard mode keeps state in each owner's memory"},
		{"store:\n  type: memory\n  sync_interval: 1s", "f.yaml:3:18: store.sync_interval: only for mode local-sync"},
		{"store:\n  type: memory\n  url: redis://x:1", "f.yaml:3:8: store.url: only for type redis"},
		{"store:\n  type: memory\n  password_file: /run/secrets/redis", "f.yaml:3:18: store.password_file: only for type redis"},
		{"store:\n  type: redis\n  url: redis://x:1\n  password_file: \"\"", "store.password_file: must not be empty"},
		{"store:\n  type: redis\n  url: redis://x:1\n  peers: [a:1]", "f.yaml:4:10: store.peers: only for mode shard"},
		{"store:\n  mode: shard\n  peers: [a:1]\n  gossip: {bind: 127.0.0.1:7946}", "f.yaml:4:11: store.gossip: peers and gossip both find members: use one"},
		{"store:\n  mode: shard\n  peers: [dns:x:1, b:2]", "f.yaml:3:10: store.peers[0]: \"dns:x:1\": a DNS name is the only peer"},
		{"store:\n  timeout: fast", "f.yaml:2:12: store.timeout: \"fast\" is not a duration: want a number and a unit, such as 250ms, 1s or 5m"},
		{"store:\n  max_keys: lots", "f.yaml:2:13: store.max_keys: \"lots\": want a whole number"},
		{"store:\n  max_bytes: lots", "f.yaml:2:14: store.max_bytes: \"lots\" is not a size: want bytes, or a number and a unit, such as 512MiB or 2GB"},
		{"store:\n  max_bytes: 64KiB", "f.yaml:2:14: store.max_bytes: must be at least 1MiB"},
		{"store:\n  timeout: [1s]", "f.yaml:2:12: store.timeout: want a single value, not a list"},
		{"store:\n  fail_mode: maybe", "f.yaml:2:14: store.fail_mode: \"maybe\": want local, open or closed"},
		// The peer port is the members' alone: shard mode names how they
		// know each other, and gossip is encrypted.
		{"store:\n  mode: shard\n  peers: [a:1]", "f.yaml:2:3: store.peer_tls: shard mode needs peer_tls (mutual TLS between members) or peer_secret_file"},
		{"store:\n  mode: shard\n  peers: [a:1]\n  peer_tls: {cert_file: c, key_file: k}", "f.yaml:4:13: store.peer_tls: cert_file, key_file and ca_file go together"},
		{"store:\n  mode: shard\n  peer_secret_file: s\n  gossip: {bind: 127.0.0.1:7946}", "f.yaml:4:11: store.gossip: gossip needs key_file"},
		{"store:\n  mode: shard\n  peers: [a:1]\n  peer_secret_file: s\n  peer_listen: 8083", "f.yaml:5:16: store.peer_listen: \"8083\": want host:port"},
		{"store:\n  type: memory\n  peer_secret_file: s", "f.yaml:3:21: store.peer_secret_file: only for mode shard"},
		{"listeners:\n  tls: {http: {cert_file: c}}", "listeners.tls.http: cert_file and key_file go together"},
		{"listeners:\n  tls: {admin: {client_ca_file: ca}}", "listeners.tls.admin: client_ca_file needs cert_file and key_file"},
		{"listeners:\n  tls: {metrics: {cert_file: c, key_file: k}}", "listeners.tls.metrics"},
		{"store:\n  type: postgres", "store.url: a postgres store needs a url"},
		{"store:\n  type: postgres\n  url: postgres://x/y\n  prefix: a", "f.yaml:4:11: store.prefix: only for type redis"},
		{"store:\n  type: redis\n  url: redis://x:1\n  durable: true", "f.yaml:4:12: store.durable: only for type postgres"},
		{"store:\n  type: memory\n  schema: s", "f.yaml:3:11: store.schema: only for type postgres"},
		{"store:\n  type: postgres\n  url: postgres://x/y\n  mode: local-sync", "store.mode: local-sync syncs local counts with a shared store: use type redis"},
		{"store:\n  type: cassandra", "f.yaml:2:9: store.type: \"cassandra\": want memory, redis or postgres"},
		{"store:\n  type: redis\n  postgres: {url: postgres://x/y}", "f.yaml:3:3: store.postgres: the settings of type postgres, and the type is redis"},
		{"store:\n  type: redis\n  url: redis://x:1\n  redis: {url: redis://y:1}", "f.yaml:4:11: store.redis.url: also given as store.url: give it once"},
		{"store:\n  type: redis\n  redis: redis://x:1", "f.yaml:3:10: store.redis: want a mapping"},
		{"store:\n  type: postgres\n  postgres: {url: postgres://x/y, prefix: a}", "store.prefix: only for type redis"},
	} {
		_, err := config.Parse("f.yaml", []byte(tt.src+pol))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q:\n got %v\nwant %s", tt.src, err, tt.want)
		}
	}
}

// A store's settings read the same flat and in the section of its type.
func TestStoreSections(t *testing.T) {
	const pol = "\npolicies: [{name: a, limit: 1/s}]\n"
	for _, src := range []string{
		"store: {type: postgres, url: postgres://x/y, schema: rl, durable: true, timeout: 2s}",
		"store: {type: postgres, timeout: 2s, postgres: {url: postgres://x/y, schema: rl, durable: true}}",
	} {
		c, err := config.Parse("f.yaml", []byte(src+pol))
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		s := c.Store
		if s.Type() != "postgres" || *s.Postgres != (config.PostgresStore{URL: "postgres://x/y", Schema: "rl", Durable: true}) ||
			s.Timeout != 2*time.Second || s.Redis != nil || s.Memory != nil {
			t.Errorf("%s: %+v %+v", src, s, s.Postgres)
		}
	}
	for _, src := range []string{
		"store: {type: redis, url: redis://x:1, prefix: p:, mode: local-sync}",
		"store: {type: redis, mode: local-sync, redis: {url: redis://x:1, prefix: p:}}",
	} {
		c, err := config.Parse("f.yaml", []byte(src+pol))
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if r := c.Store.Redis; r == nil || r.URL != "redis://x:1" || r.Prefix != "p:" || r.LocalSync == nil {
			t.Errorf("%s: %+v", src, r)
		}
	}
	if c, err := config.Parse("f.yaml", []byte("store: {memory: {}}"+pol)); err != nil || c.Store.Type() != "memory" {
		t.Errorf("store: {memory: {}}: %v", err)
	}
}

// Each kind and mode reads into its own type, over the defaults.
func TestStoreKindsAndDefaults(t *testing.T) {
	const pol = "\npolicies: [{name: a, limit: 1/s}]\n"
	c, err := config.Parse("f.yaml", []byte("store: {type: redis, url: redis://x:1, mode: local-sync, instances: 3}"+pol))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Store
	if s.Type() != "redis" || s.Mode() != "local-sync" || s.Redis.URL != "redis://x:1" || s.Redis.LocalSync.Interval != 100*time.Millisecond ||
		s.Instances != 3 || s.Timeout != sluice.DefaultTimeout || s.FailMode != sluice.FailLocal || s.Memory != nil {
		t.Fatalf("redis local-sync: %+v", s)
	}
	if s.MaxBytes != memstore.DefaultMaxBytes {
		t.Fatalf("max_bytes default: %d", s.MaxBytes)
	}
	for src, want := range map[string]int64{"64MiB": 64 << 20, "2GB": 2e9, "1048576": 1 << 20, "1 GiB": 1 << 30} {
		c, err := config.Parse("f.yaml", []byte("store: {max_bytes: "+src+"}"+pol))
		if err != nil || c.Store.MaxBytes != want {
			t.Errorf("max_bytes: %s: %v, %v; want %d", src, c, err, want)
		}
	}
	c, err = config.Parse("f.yaml", []byte("store: {mode: shard, peer_secret_file: /run/peer, gossip: {bind: 127.0.0.1:7946, join: [127.0.0.1:7947], key_file: /run/gossip}}"+pol))
	if err != nil {
		t.Fatal(err)
	}
	if sh := c.Store.Memory.Shard; c.Store.Mode() != "shard" || sh.Gossip.Bind != "127.0.0.1:7946" || sh.Gossip.KeyFile != "/run/gossip" || sh.MemberInterval != time.Second ||
		sh.Listen != "127.0.0.1:8083" || sh.SecretFile != "/run/peer" || c.Store.Redis != nil {
		t.Fatalf("memory shard: %+v %+v", c.Store, sh)
	}
	c, err = config.Parse("f.yaml", []byte("policies: [{name: a, limit: 1/s}, {name: b, limit: 1/s, fail_mode: open}]"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy("a").FailMode != sluice.FailLocal || c.Policy("b").FailMode != sluice.FailOpen || c.Policy("a").Key != "client_ip" || c.Policy("a").Cost != 1 {
		t.Fatalf("policies: %+v %+v", c.Policy("a"), c.Policy("b"))
	}
}

// Redact hides every secret of a file and keeps the rest.
func TestRedact(t *testing.T) {
	src := `# the store
store:
  type: redis
  url: redis://app:s3cret@redis.internal:6379/0
admin:
  token: t0ken  # the admin token
policies:
  - {name: a, limit: 1/s}
`
	out := string(config.Redact([]byte(src))) + string(config.Redact([]byte("store: {type: redis, url: \"redis-sentinel://:s3cret@s1:26379/m?sentinel_password=s3ntinel\"}\n")))
	for _, secret := range []string{"s3cret", "t0ken", "s3ntinel"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q shown:\n%s", secret, out)
		}
	}
	for _, kept := range []string{"# the store", "redis://app:REDACTED@redis.internal:6379/0", "token: REDACTED", "name: a", "sentinel_password=REDACTED"} {
		if !strings.Contains(out, kept) {
			t.Errorf("%q missing:\n%s", kept, out)
		}
	}
	if got := string(config.Redact([]byte("store: [\n"))); strings.Contains(got, "store") {
		t.Errorf("an unparsable file shown: %q", got)
	}
}

// A file YAML cannot parse is reported at the line that breaks it, in
// sluice's words, not at the start of the list around it in the YAML
// library's.
func TestSyntaxErrorsInOurWords(t *testing.T) {
	for src, want := range map[string]string{
		"policies:\n  - name: a\n    limit: 1/s\n   - name: b\n    limit: 2/s\n": "f.yaml:4:4: this line does not line up with the list above it",
		"store:\n  type: memory\n policies: []\n":                                "f.yaml:3:2: this line does not line up with the fields above it",
		"policies:\n  - name: \"a\n":                                             "f.yaml:2:3: the file ends inside a quoted value or a bracket",
	} {
		_, err := config.Parse("f.yaml", []byte(src))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v; want %s", src, err, want)
		}
	}
}

func TestCalendarLimits(t *testing.T) {
	src := `policies:
  - name: monthly
    limit: calendar 50000/month tz=America/New_York
  - name: daily
    limit: {algorithm: calendar, rate: 1000, unit: day, tz: Europe/Paris}
`
	cfg, err := config.Parse("c.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"monthly": "calendar 50000/month tz=America/New_York", "daily": "calendar 1000/day tz=Europe/Paris"} {
		if got := cfg.Policy(name).Limits[0].String(); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	_, err = config.Parse("c.yaml", []byte("policies:\n  - name: a\n    limit: {algorithm: calendar, rate: 5, unit: fortnight}\n"))
	if err == nil || !strings.Contains(err.Error(), "c.yaml:3:") || !strings.Contains(err.Error(), "policies[0].limit.unit") {
		t.Errorf("unknown unit: %v; want an error at policies[0].limit.unit", err)
	}
}

// A policy charged by its answer: an estimate settled to what the answer
// reports, or charged only for some statuses.
func TestCostFromTheAnswer(t *testing.T) {
	src := `policies:
  - name: tokens
    limit: 100000/1m
    key: header:Authorization
    match: "POST /v1/chat/completions"
    cost:
      estimate: 1000
      from: json:usage.total_tokens
      unread: 4000
  - name: failed-logins
    limit: 5/15m
    match: "POST /login"
    charge_status: [401, 403]
  - name: plain
    limit: 10/s
    cost: 2
`
	c, err := config.Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Policy("tokens"); p.Cost != 1000 || p.CostFrom.String() != "json:usage.total_tokens" || p.CostUnread != 4000 {
		t.Fatalf("tokens: cost %d from %q, unread %d", p.Cost, p.CostFrom, p.CostUnread)
	}
	if p := c.Policy("failed-logins"); p.Cost != 1 || len(p.ChargeStatus) != 2 || p.ChargeStatus[1] != 403 {
		t.Fatalf("failed-logins: cost %d, charge_status %v", p.Cost, p.ChargeStatus)
	}
	if p := c.Policy("plain"); p.Cost != 2 || p.CostFrom.String() != "" {
		t.Fatalf("plain: cost %d from %q", p.Cost, p.CostFrom)
	}
}

// A directory's dot files are not loaded, as envoyproxy/ratelimit's
// RUNTIME_IGNOREDOTFILES skips them: an editor's lock (.#name.yaml, a
// link to nowhere) or backup beside the files would otherwise refuse the
// whole directory, or add a domain twice.
func TestLoadDirIgnoresDotFiles(t *testing.T) {
	dir := t.TempDir()
	const domain = "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 5}}\n"
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(domain), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".d.yaml"), []byte(domain), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("user@host.1234:1700000000", filepath.Join(dir, ".#d.yaml")); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(dir)
	if err != nil || c.Domains["d"] == nil {
		t.Fatalf("load: %v, %v; want domain d from d.yaml alone", c, err)
	}
}

// A listener bound of zero is refused where it is written: every listener
// is bounded, and the proxy's idle connections to its upstream too.
func TestListenerBoundsMustBePositive(t *testing.T) {
	for _, field := range []string{"idle_timeout", "upstream_idle_timeout", "max_streams"} {
		_, err := config.Parse("p.yaml", []byte("listeners:\n  "+field+": 0\n"))
		if want := fmt.Sprintf("p.yaml:2:%d: listeners.%s: must be positive", len(field)+5, field); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: 0: %v; want %q", field, err, want)
		}
	}
}

// The reservations' bounds default to 32MiB, 16MiB a policy and 1MiB a
// key, read sizes, and refuse one under 64KiB or past the bound above it,
// naming the field.
func TestReservationBounds(t *testing.T) {
	const pol = "\npolicies: [{name: a, limit: 1/s}]"
	c, err := config.Parse("r.yaml", []byte("store: {type: memory}"+pol))
	if err != nil {
		t.Fatal(err)
	}
	if want := (config.Reservations{MaxBytes: 32 << 20, MaxBytesPerPolicy: 16 << 20, MaxBytesPerKey: 1 << 20}); c.Reservations != want {
		t.Fatalf("defaults: %+v, want %+v", c.Reservations, want)
	}
	if c := config.Default(); c.Reservations.MaxBytes != 32<<20 {
		t.Fatalf("the embedded default: %+v", c.Reservations)
	}
	c, err = config.Parse("r.yaml", []byte("reservations: {max_bytes: 8MiB, max_bytes_per_policy: 8MiB, max_bytes_per_key: 64KiB}"+pol))
	if err != nil || c.Reservations != (config.Reservations{MaxBytes: 8 << 20, MaxBytesPerPolicy: 8 << 20, MaxBytesPerKey: 64 << 10}) {
		t.Fatalf("set: %+v, %v", c, err)
	}
	for _, tt := range []struct{ src, want string }{
		{"reservations:\n  max_bytes_per_key: 1000", "r.yaml:2:22: reservations.max_bytes_per_key: 1000: must be at least 64KiB"},
		{"reservations:\n  max_bytes: 1MiB", "r.yaml:2:14: reservations.max_bytes: 1048576: less than reservations.max_bytes_per_policy (16777216, its default)"},
		{"reservations:\n  max_bytes: 1MiB\n  max_bytes_per_policy: 2MiB", "r.yaml:3:25: reservations.max_bytes_per_policy: 2097152: more than reservations.max_bytes (1048576)"},
		{"reservations:\n  max_bytes_per_key: 20MiB", "r.yaml:2:22: reservations.max_bytes_per_key: 20971520: more than reservations.max_bytes_per_policy (16777216)"},
		{"reservations:\n  max_bytes: lots", "r.yaml:2:14: reservations.max_bytes: \"lots\" is not a size"},
		{"reservations:\n  max_open: 10", "reservations.max_open"},
	} {
		if _, err := config.Parse("r.yaml", []byte(tt.src+pol)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q:\n got %v\nwant %s", tt.src, err, tt.want)
		}
	}
}
