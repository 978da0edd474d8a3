// Package config reads sluice's policy file: YAML with the store, the
// named policies of the HTTP and gRPC checks, and rate-limit domains in
// envoyproxy/ratelimit's own format, so its users can switch without
// rewriting their files. A file that holds only an envoyproxy/ratelimit
// domain (a top-level "domain:") is read as that domain.
//
// Parse reports every problem at once, each with file:line:column and the
// field. docs/config.md is the reference; Default is the embedded file
// `sluice serve` starts with.
package config

import (
	"cmp"
	_ "embed"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultName is the name the embedded default file is reported under.
const DefaultName = "(embedded default)"

// Default returns the embedded default config: the memory store and a few
// example policies and an example Envoy domain.
func Default() *Config {
	c, err := Parse(DefaultName, defaultYAML)
	if err != nil {
		panic("config: the embedded default is invalid: " + err.Error())
	}
	return c
}

// Config is a parsed, validated policy file.
type Config struct {
	File           string
	Source         []byte // the file as read
	Store          Store
	TrustedProxies []string // CIDRs whose X-Forwarded-For the proxy trusts
	Admin          Admin
	Policies       []*Policy
	Domains        map[string]*Domain
}

// Store says where state lives.
type Store struct {
	Type     string        // "memory" or "redis"
	URL      string        // for redis
	Timeout  time.Duration // per store call; default 100ms
	FailMode sluice.FailMode
	MaxKeys  int // memory: the key bound
	// Mode is "" (decide in the store) or "local-sync": decide locally and
	// sync with the (Redis) store every SyncInterval, each instance taking
	// 1/Instances of the remaining between syncs.
	Mode         string
	SyncInterval time.Duration
	Instances    int
	// Shard mode ("shard"): the members' gRPC addresses (or dns:NAME:PORT),
	// this instance's own (default: its gRPC listen address), and how often
	// membership is checked.
	Peers          []string
	Self           string
	MemberInterval time.Duration
	// GossipBind, if set, finds members by gossip (memberlist) on this
	// address instead of Peers, joining GossipJoin.
	GossipBind string
	GossipJoin []string
}

// Admin configures the admin API.
type Admin struct {
	Token string // required for the admin API to start (or SLUICE_ADMIN_TOKEN)
}

// Policy is a named set of limits, checked by name over the APIs and
// applied by pattern in the proxy.
type Policy struct {
	Name     string
	Limits   []sluice.Limit
	Key      string // the proxy's key spec, such as "client_ip" or "header:X-API-Key"
	Match    string // the proxy's ServeMux pattern; "" matches every request
	Cost     int64  // default cost of a check
	FailMode sluice.FailMode
	Shadow   bool
	Shape    bool // proxy: queue (leaky bucket) instead of rejecting
}

// Policy returns the named policy, or nil.
func (c *Config) Policy(name string) *Policy {
	for _, p := range c.Policies {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Load reads and parses the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// Parse parses data, read from file, reporting every problem at once as
// Problems.
func Parse(file string, data []byte) (*Config, error) {
	c := &checker{file: file}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, Problems{{File: file, Line: lineOf(err), Column: 1, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		return nil, Problems{{File: file, Line: 1, Column: 1, Msg: "empty file: want policies, domains, or an envoyproxy/ratelimit domain"}}
	}
	doc := root.Content[0]
	cfg := &Config{File: file, Source: data, Domains: map[string]*Domain{}}
	if doc.Kind == yaml.MappingNode && hasKey(doc, "domain") {
		if d := c.domain(doc, ""); d != nil {
			cfg.Domains[d.Name] = d
		}
		cfg.Store = Store{Type: "memory", Timeout: sluice.DefaultTimeout}
	} else {
		m := c.mapping(doc, "", "store", "admin", "policies", "domains", "trusted_proxies")
		cfg.Store = c.store(m["store"])
		for i, n := range c.sequence(m["trusted_proxies"], "trusted_proxies") {
			v := c.str(n, fmt.Sprintf("trusted_proxies[%d]", i))
			if _, err := clientip.RightmostUntrusted("X-Forwarded-For", []string{v}); err != nil {
				c.add(n, fmt.Sprintf("trusted_proxies[%d]", i), "%q is not an address or CIDR", v)
			}
			cfg.TrustedProxies = append(cfg.TrustedProxies, v)
		}
		cfg.Admin = c.admin(m["admin"])
		c.policies(m["policies"], cfg)
		for i, n := range c.sequence(m["domains"], "domains") {
			if d := c.domain(n, fmt.Sprintf("domains[%d]", i)); d != nil {
				if _, dup := cfg.Domains[d.Name]; dup {
					c.add(n, fmt.Sprintf("domains[%d].domain", i), "domain %q is defined twice", d.Name)
				}
				cfg.Domains[d.Name] = d
			}
		}
		if len(cfg.Policies) == 0 && len(cfg.Domains) == 0 {
			c.add(doc, "", "no policies and no domains: nothing to limit")
		}
	}
	if len(c.problems) > 0 {
		slices.SortStableFunc(c.problems, func(a, b Problem) int {
			return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
		})
		return nil, c.problems
	}
	return cfg, nil
}

func hasKey(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

func lineOf(err error) int {
	var line int
	if _, e := fmt.Sscanf(strings.TrimPrefix(err.Error(), "yaml: "), "line %d:", &line); e == nil {
		return line
	}
	return 1
}

func (c *checker) store(n *yaml.Node) Store {
	s := Store{Type: "memory", Timeout: sluice.DefaultTimeout}
	m := c.mapping(n, "store", "type", "url", "timeout", "fail_mode", "max_keys", "mode", "sync_interval", "instances", "peers", "self", "member_interval", "gossip")
	if v := c.str(m["type"], "store.type"); v != "" {
		if v != "memory" && v != "redis" {
			c.add(m["type"], "store.type", "%q: want memory or redis", v)
		}
		s.Type = v
	}
	s.URL = c.str(m["url"], "store.url")
	if s.Type == "redis" && s.URL == "" {
		c.add(n, "store.url", "a redis store needs a url, such as redis://127.0.0.1:6379")
	}
	if m["timeout"] != nil {
		if c.decode(m["timeout"], "store.timeout", &s.Timeout) && s.Timeout <= 0 {
			c.add(m["timeout"], "store.timeout", "must be positive")
		}
	}
	s.FailMode = c.failMode(m["fail_mode"], "store.fail_mode")
	if m["max_keys"] != nil && c.decode(m["max_keys"], "store.max_keys", &s.MaxKeys) && s.MaxKeys <= 0 {
		c.add(m["max_keys"], "store.max_keys", "must be positive")
	}
	switch s.Mode = c.str(m["mode"], "store.mode"); s.Mode {
	case "":
	case "local-sync":
		if s.Type != "redis" {
			c.add(m["mode"], "store.mode", "local-sync syncs local counts with a shared store: use type redis")
		}
	case "shard":
		if s.Type != "memory" {
			c.add(m["mode"], "store.mode", "shard mode keeps state in each owner's memory: use type memory")
		}
	default:
		c.add(m["mode"], "store.mode", "%q: want local-sync, shard, or nothing", s.Mode)
	}
	for i, n := range c.sequence(m["peers"], "store.peers") {
		s.Peers = append(s.Peers, c.str(n, fmt.Sprintf("store.peers[%d]", i)))
	}
	g := c.mapping(m["gossip"], "store.gossip", "bind", "join")
	s.GossipBind = c.str(g["bind"], "store.gossip.bind")
	for i, n := range c.sequence(g["join"], "store.gossip.join") {
		s.GossipJoin = append(s.GossipJoin, c.str(n, fmt.Sprintf("store.gossip.join[%d]", i)))
	}
	if s.Mode == "shard" && len(s.Peers) == 0 && s.GossipBind == "" {
		c.add(n, "store.peers", "shard mode needs peers (the members' gRPC addresses, or dns:NAME:PORT) or gossip: {bind, join}")
	}
	s.Self = c.str(m["self"], "store.self")
	s.MemberInterval = time.Second
	if m["member_interval"] != nil && c.decode(m["member_interval"], "store.member_interval", &s.MemberInterval) && s.MemberInterval < 10*time.Millisecond {
		c.add(m["member_interval"], "store.member_interval", "must be at least 10ms")
	}
	s.SyncInterval, s.Instances = 100*time.Millisecond, 1
	if m["sync_interval"] != nil && c.decode(m["sync_interval"], "store.sync_interval", &s.SyncInterval) && s.SyncInterval < time.Millisecond {
		c.add(m["sync_interval"], "store.sync_interval", "must be at least 1ms")
	}
	if m["instances"] != nil && c.decode(m["instances"], "store.instances", &s.Instances) && s.Instances < 1 {
		c.add(m["instances"], "store.instances", "must be at least 1")
	}
	return s
}

func (c *checker) admin(n *yaml.Node) Admin {
	m := c.mapping(n, "admin", "token")
	return Admin{Token: c.str(m["token"], "admin.token")}
}

func (c *checker) failMode(n *yaml.Node, field string) sluice.FailMode {
	m, err := sluice.ParseFailMode(c.str(n, field))
	if err != nil {
		c.add(n, field, "%q: want local, open or closed", n.Value)
	}
	return m
}

func (c *checker) policies(n *yaml.Node, cfg *Config) {
	seen := map[string]bool{}
	for i, pn := range c.sequence(n, "policies") {
		field := fmt.Sprintf("policies[%d]", i)
		m := c.mapping(pn, field, "name", "limit", "limits", "key", "match", "cost", "fail_mode", "shadow", "shape")
		p := &Policy{Name: c.str(m["name"], field+".name"), Cost: 1}
		switch {
		case p.Name == "":
			c.add(pn, field+".name", "required")
		case seen[p.Name]:
			c.add(m["name"], field+".name", "policy %q is defined twice", p.Name)
		}
		seen[p.Name] = true
		if m["limit"] != nil {
			p.Limits = append(p.Limits, c.limit(m["limit"], field+".limit"))
		}
		for j, ln := range c.sequence(m["limits"], field+".limits") {
			p.Limits = append(p.Limits, c.limit(ln, fmt.Sprintf("%s.limits[%d]", field, j)))
		}
		if len(p.Limits) == 0 {
			c.add(pn, field+".limit", "required: a limit such as 100/1m, or limits: [...]")
		}
		p.Key = c.str(m["key"], field+".key")
		if p.Key == "" {
			p.Key = "client_ip"
		}
		if err := ValidateKeySpec(p.Key); err != nil {
			c.add(m["key"], field+".key", "%v", err)
		}
		p.Match = c.str(m["match"], field+".match")
		if p.Match != "" {
			if err := httplimit.ValidatePattern(p.Match); err != nil {
				c.add(m["match"], field+".match", "%v", err)
			}
		}
		if m["cost"] != nil && c.decode(m["cost"], field+".cost", &p.Cost) {
			for _, l := range p.Limits {
				if l.Validate() == nil && (p.Cost < 0 || p.Cost > l.Capacity()) {
					c.add(m["cost"], field+".cost", "%d is outside 0..%d, the capacity of %v", p.Cost, l.Capacity(), l)
				}
			}
		}
		p.FailMode = c.failMode(m["fail_mode"], field+".fail_mode")
		c.decode(m["shadow"], field+".shadow", &p.Shadow)
		c.decode(m["shape"], field+".shape", &p.Shape)
		if p.Shape {
			for _, l := range p.Limits {
				if l.Algorithm.Resolved() != sluice.LeakyBucket {
					c.add(m["shape"], field+".shape", "shaping queues requests: its limits must be leaky_bucket, not %v", l.Algorithm.Resolved())
					break
				}
			}
		}
		cfg.Policies = append(cfg.Policies, p)
	}
}

// limit reads "100/1m" (ParseLimit) or a mapping of algorithm, rate,
// period and burst.
func (c *checker) limit(n *yaml.Node, field string) sluice.Limit {
	if n.Kind == yaml.ScalarNode {
		l, err := sluice.ParseLimit(n.Value)
		if err != nil {
			c.add(n, field, "%v", strings.TrimPrefix(err.Error(), "sluice: "))
		}
		return l
	}
	m := c.mapping(n, field, "algorithm", "rate", "period", "burst")
	var l sluice.Limit
	if v := c.str(m["algorithm"], field+".algorithm"); v != "" {
		a, err := sluice.ParseAlgorithm(v)
		if err != nil {
			c.add(m["algorithm"], field+".algorithm", "%v", strings.TrimPrefix(err.Error(), "sluice: "))
		}
		l.Algorithm = a
	}
	c.decode(m["rate"], field+".rate", &l.Rate)
	c.decode(m["period"], field+".period", &l.Period)
	c.decode(m["burst"], field+".burst", &l.Burst)
	if err := l.Validate(); err != nil {
		c.add(n, field, "%v", strings.TrimPrefix(err.Error(), "sluice: "))
	}
	return l
}

// ValidateKeySpec checks a proxy key spec: client_ip, header:NAME,
// user:HEADER, user_agent, route, or a "+"-joined composition of them.
func ValidateKeySpec(spec string) error {
	for _, part := range strings.Split(spec, "+") {
		name, arg, _ := strings.Cut(strings.TrimSpace(part), ":")
		switch name {
		case "client_ip", "user_agent", "route":
			if arg != "" {
				return fmt.Errorf("key %q: %s takes no argument", spec, name)
			}
		case "header", "user":
			if arg == "" {
				return fmt.Errorf("key %q: %s needs a header name, as in %s:X-API-Key", spec, name, name)
			}
		default:
			return fmt.Errorf("key %q: unknown part %q (want client_ip, header:NAME, user:HEADER, user_agent or route, joined with +)", spec, name)
		}
	}
	return nil
}
