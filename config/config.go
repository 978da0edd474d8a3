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
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
)

//go:embed default.yaml
var defaultYAML []byte

//go:embed schema.json
var schemaJSON []byte

// Schema returns the JSON Schema (draft 2020-12) of the policy file, for
// editors: what Parse reads, less what only Parse can check (a limit's
// grammar, a pattern's syntax, which fields a store's mode uses).
func Schema() []byte { return slices.Clone(schemaJSON) }

// DefaultName is the name the embedded default file is reported under.
const DefaultName = "(embedded default)"

// Default returns the embedded default config: the memory store and a few
// example policies and an example Envoy domain.
func Default() *Config {
	c, err := Parse(DefaultName, defaultYAML)
	if err != nil {
		panic("config: the embedded default is invalid: " + err.Error())
	}
	c.Store.FailModeSet = false // the default's choice, not an operator's
	return c
}

// Config is a parsed, validated policy file.
type Config struct {
	File           string
	Source         []byte // the file as read
	Store          Store
	Listeners      Listeners
	Envoy          Envoy
	Metrics        Metrics
	UI             UI
	TrustedProxies []string // CIDRs whose X-Forwarded-For the proxy trusts
	Admin          Admin
	ForwardAuth    ForwardAuth
	Reservations   Reservations
	Policies       []*Policy
	Domains        map[string]*Domain
}

// Reservations bounds the reservations the service's API holds open
// (POST /v1/check with "reserve", until /v1/settle or /v1/cancel), in
// bytes of memory as the service counts each: its id, key, policy and
// limits, and its share of the indexes. A reservation that would pass a
// bound is refused before its check is decided; an open one is never
// pushed out by another. Each bound is at least 64KiB, and a key's is at
// most its policy's, which is at most MaxBytes.
type Reservations struct {
	MaxBytes          int64 // all open reservations together. Default 32MiB.
	MaxBytesPerPolicy int64 // those of one policy. Default 16MiB.
	MaxBytesPerKey    int64 // those of one key of one policy. Default 1MiB.
}

// ForwardAuth is what /v1/forward-auth reads of a gateway's question and
// how it answers a refusal.
type ForwardAuth struct {
	// DenyStatus is the status of a refusal: 429, or 403 for gateways
	// that understand only 2xx, 401 and 403 (nginx auth_request). A
	// request's ?deny_status= overrides it.
	DenyStatus int
	// RequestHeaders is the pair of headers the gateway describes the
	// original request in: RequestHeadersOriginal (X-Original-Method and
	// X-Original-URI, nginx), RequestHeadersForwarded (X-Forwarded-Method
	// and X-Forwarded-Uri: Caddy, Traefik, HAProxy), or "" for whichever
	// of the two a check carries, a check carrying both being refused.
	// With a pair named, the other is a client's and never read.
	RequestHeaders string
}

// The values of ForwardAuth.RequestHeaders.
const (
	RequestHeadersOriginal  = "x-original"
	RequestHeadersForwarded = "x-forwarded"
)

// Store says where state lives and how checks are decided while it fails.
// Exactly one of Memory, Redis and Postgres is set, by the section's type:
// each holds the settings of its kind, and of its mode where it has one.
// The file gives them flat (store: {type: redis, url: ...}) or in a
// section named after the type (store: {type: redis, redis: {url: ...}}).
type Store struct {
	Memory   *MemoryStore
	Redis    *RedisStore
	Postgres *PostgresStore
	// Timeout bounds each store call.
	Timeout time.Duration
	// FailMode decides Envoy domains' checks while the store fails.
	FailMode sluice.FailMode
	// FailModeSet says the file names the store's fail_mode, rather than
	// leaving it to the default: an operator who chose how checks are
	// decided while Redis fails may start on a Redis that refuses sluice's
	// decision.
	FailModeSet bool
	// MaxKeys bounds the keys of the memory store, and of the stand-in
	// that fail_mode local decides with while Redis fails.
	MaxKeys int
	// MaxBytes bounds the heap their keys hold (memstore.Options.MaxBytes).
	MaxBytes int64
	// Instances is how many sluice processes share the store: while it
	// fails, and in local-sync mode, each takes its share of a key.
	Instances int
}

// Type is "memory", "redis" or "postgres".
func (s *Store) Type() string {
	switch {
	case s.Redis != nil:
		return "redis"
	case s.Postgres != nil:
		return "postgres"
	}
	return "memory"
}

// Mode is "", "local-sync" or "shard".
func (s *Store) Mode() string {
	switch {
	case s.Redis != nil && s.Redis.LocalSync != nil:
		return "local-sync"
	case s.Memory != nil && s.Memory.Shard != nil:
		return "shard"
	}
	return ""
}

// MemoryStore is the in-process store, optionally sharded across peers.
type MemoryStore struct {
	Shard *Shard // nil: this process alone
}

// Shard is shard mode: each key owned by one member, found in Peers (the
// members' peer addresses, or one dns:NAME:PORT) or by Gossip. Members
// talk on a listener of their own, Listen, and know each other by TLS,
// a secret, or both: at least one is set.
type Shard struct {
	Peers          []string
	Gossip         *Gossip
	Self           string // this member's address as the others reach it; "" means Listen
	MemberInterval time.Duration
	Listen         string  // the peer listener's address
	TLS            PeerTLS // mutual TLS between members; zero: none
	SecretFile     string  // a file of the members' shared secrets, one a line; "": none
}

// PeerTLS is the mutual TLS of shard members (tlsfiles.Files): each
// presents its certificate and key, and accepts a peer whose certificate
// the CA bundle signed. The three go together.
type PeerTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	CAFile   string `yaml:"ca_file"`
}

// Gossip finds shard members with memberlist.
type Gossip struct {
	Bind string
	Join []string
	// KeyFile holds the keys that encrypt the gossip, base64, one a line:
	// the first encrypts, any decrypts. Required.
	KeyFile string
}

// RedisStore is Redis (standalone, Sentinel or Cluster, by its URL),
// optionally in local-sync mode.
type RedisStore struct {
	URL    string
	Prefix string   // starts every key and channel; "" is "sluice:"
	TLS    RedisTLS // over the URL's own tls_* parameters
	// PasswordFile holds the password of the URL's user, read again at
	// each new connection (redisstore.Options.PasswordFile).
	PasswordFile string
	LocalSync    *LocalSync // nil: every check decided in Redis
}

// PostgresStore is PostgreSQL (package pgstore).
type PostgresStore struct {
	URL     string // postgres://…, TLS by its sslmode, sslrootcert, sslcert and sslkey
	Schema  string // the schema of sluice's tables and functions; "" is "sluice"
	Durable bool   // every state in the logged table, not only calendar quotas
}

// RedisTLS is the TLS of the connection to Redis (redisstore.TLS).
type RedisTLS struct {
	CAFile                   string `yaml:"ca_file"`
	CertFile                 string `yaml:"cert_file"`
	KeyFile                  string `yaml:"key_file"`
	ServerName               string `yaml:"server_name"`
	SkipHostnameVerification bool   `yaml:"skip_hostname_verification"`
	InsecureSkipVerify       bool   `yaml:"insecure_skip_verify"`
}

// LocalSync is local-sync mode: decide locally, sync with Redis every
// Interval.
type LocalSync struct {
	Interval time.Duration
}

// Listeners bounds every listener of `sluice serve` and `sluice proxy`,
// so that no client can hold a connection, a file descriptor or a
// goroutine for long: a slow header, a slow body, an idle keep-alive.
type Listeners struct {
	ReadHeaderTimeout   time.Duration // a request's headers must arrive within it
	ReadTimeout         time.Duration // its headers and body
	WriteTimeout        time.Duration // from the end of the headers to the end of the answer
	ProxyTimeout        time.Duration // `sluice proxy`: its read and write timeouts, for uploads and streamed answers
	IdleTimeout         time.Duration // a keep-alive connection between requests; gRPC: a connection without calls
	UpstreamIdleTimeout time.Duration // `sluice proxy`: a connection to the upstream left unused, closed before the upstream's keep-alive timeout can close it under a request
	MaxHeaderBytes      int           // a request's headers
	MaxConnections      int           // open connections per listener; more wait to be accepted
	MaxStreams          int           // gRPC: concurrent calls per connection
	Drain               time.Duration // on SIGTERM, how long /readyz answers 503 before the listeners close
	TLS                 ListenersTLS  // each listener's TLS; zero: plain TCP
}

// ListenersTLS is the TLS of each listener: `sluice serve`'s HTTP (and
// `sluice proxy`'s metrics listener), gRPC and admin, and `sluice proxy`'s.
type ListenersTLS struct {
	HTTP  ListenerTLS `yaml:"http"`
	GRPC  ListenerTLS `yaml:"grpc"`
	Admin ListenerTLS `yaml:"admin"`
	Proxy ListenerTLS `yaml:"proxy"`
}

// ListenerTLS is one listener's TLS (tlsfiles.Files): its certificate and
// key, and with ClientCAFile mutual TLS, a client refused unless it
// presents a certificate that bundle signed. The zero value is plain TCP.
type ListenerTLS struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
}

// Envoy is how the Envoy rate limit service answers, where
// envoyproxy/ratelimit makes it a setting.
type Envoy struct {
	// ResponseHeaders adds the rate headers of the descriptor closest to
	// its limit to every answer (LIMIT_RESPONSE_HEADERS_ENABLED), under
	// these names.
	ResponseHeaders                           bool
	LimitHeader, RemainingHeader, ResetHeader string
	// ShadowMode answers OK whatever the limits say (SHADOW_MODE), still
	// counting and reporting OVER_LIMIT per descriptor.
	ShadowMode bool
	// QuotaMode puts every descriptor in quota mode (QUOTA_MODE): a request
	// is OVER_LIMIT only when all of its descriptors are.
	QuotaMode bool
}

// Metrics configures what the service counts beyond results.
type Metrics struct {
	// NearLimitRatio: an allowed check with at most 1 - NearLimitRatio of
	// its limit left counts as near the limit (envoyproxy/ratelimit's
	// NEAR_LIMIT_RATIO). Default 0.8.
	NearLimitRatio float64
}

// UI configures the status page (/ui/ on the admin listener).
type UI struct {
	// TopKeys is how many of the most denied keys the page keeps per
	// policy or domain (a space-saving sketch of that many counters, keys
	// cut to 256 bytes); 0 keeps none. Keys can be personal data: they are
	// shown only behind the page's login. Default 32.
	TopKeys int
}

// Admin configures the admin API.
type Admin struct {
	Token string // required for the admin API to start (or SLUICE_ADMIN_TOKEN)
}

// Policy is a named set of limits, checked by name over the APIs and
// applied by pattern in the proxy.
type Policy struct {
	Name   string
	Limits []sluice.Limit
	Key    string // the proxy's key spec, such as "client_ip" or "header:X-API-Key"
	// Match is the ServeMux pattern of the requests the proxy and
	// forward-auth apply the policy to ("/" for every request); "" for
	// none: the policy is checked by name only (POST /v1/check, gRPC).
	Match string
	Cost  int64 // default cost of a check; with CostFrom, the estimate
	// CostFrom is where the proxy reads what a request really cost, from
	// its answer: the zero source for none.
	CostFrom httplimit.CostSource
	// CostUnread is the least charged for an answer whose cost cannot be
	// read (httplimit.Policy.CostUnread); 0 for none.
	CostUnread int64
	// ChargeStatus are the only answers the proxy charges for; none means
	// every answer.
	ChargeStatus []int
	FailMode     sluice.FailMode
	// Missing decides the proxy's requests whose key cannot be built.
	Missing sluice.MissingKey
	Shadow  bool
	Shape   bool // proxy: queue (leaky bucket) instead of rejecting
	// Concurrency, if above 0, is how many requests of one key the proxy
	// lets be in flight at once; ConcurrencyWait how long a request waits
	// for a slot before it is refused.
	Concurrency     int64
	ConcurrencyWait time.Duration
	// Overrides give the keys they match limits of their own, in place of
	// Limits; the first that matches applies.
	Overrides []Override
	// Plans are named sets of limits chosen per request, in place of
	// Limits: by the check's plan over the APIs, by PlanFrom in the proxy.
	// An unknown or missing plan gets Limits.
	Plans    map[string][]sluice.Limit
	PlanFrom string // the proxy's source of a request's plan: header:NAME
	// SecretKeys reports that the policy's keys are credentials, which the
	// status page, the admin API and the logs show only as a short hash
	// (ShownKey): the policy file's secret, or else whether Key reads a
	// header named like a credential (CredentialName).
	SecretKeys bool

	overrideIdx *overrideIndex // Overrides indexed, by the parser
}

// ForwardAuthCaveats returns, a sentence each, what forward-auth cannot
// apply of p: the gateway never shows sluice the upstream's answer, nor
// tells it when the request ends. A cost read from the answer and
// charge_status are charged as the estimate instead; concurrency is not
// applied. None for a policy without Match, which forward-auth never
// applies.
func (p *Policy) ForwardAuthCaveats() []string {
	if p.Match == "" {
		return nil
	}
	var cs []string
	if len(p.ChargeStatus) > 0 || p.CostFrom.String() != "" {
		cs = append(cs, fmt.Sprintf("forward-auth never sees the upstream's answer: it charges the estimate, cost %d, per request (cost.from and charge_status apply in sluice proxy only)", p.Cost))
	}
	if p.Concurrency > 0 {
		what := "applies the policy's limits only"
		if len(p.Limits) == 0 {
			what = "does not apply this policy"
		}
		cs = append(cs, fmt.Sprintf("forward-auth cannot hold concurrency %d: the gateway never says when a request ends, so forward-auth %s (concurrency applies in sluice proxy and the middleware)", p.Concurrency, what))
	}
	return cs
}

// Warnings returns, a line each, what of c is valid but will not do all
// it seems to: each policy's ForwardAuthCaveats.
func (c *Config) Warnings() []string {
	var ws []string
	for _, p := range c.Policies {
		for _, w := range p.ForwardAuthCaveats() {
			ws = append(ws, fmt.Sprintf("policy %q: %s", p.Name, w))
		}
	}
	return ws
}

// overrideIndex finds a key's first override without trying each:
// the plain keys in a map, and the patterns in order.
type overrideIndex struct {
	plain    map[string]int // the key a plain override matches → its index
	patterns []int          // the overrides with a wildcard, in order
}

// add indexes override i, whose key is pattern.
func (x *overrideIndex) add(i int, pattern string) {
	if !plainKey(pattern) {
		x.patterns = append(x.patterns, i)
		return
	}
	if _, ok := x.plain[unquote(pattern)]; !ok {
		x.plain[unquote(pattern)] = i
	}
}

// first returns the index of the first of overrides that matches key,
// or -1: the plain key's, unless a pattern before it matches.
func (x *overrideIndex) first(overrides []Override, key string) int {
	plain, ok := x.plain[key]
	if !ok {
		plain = -1
	}
	for _, i := range x.patterns {
		if ok && i > plain {
			break
		}
		if MatchKey(overrides[i].Key, key) {
			return i
		}
	}
	return plain
}

// Override is the limits of the keys Key matches: a key, or a pattern in
// which * matches any run of characters, ? one character, and \ makes
// the next one plain.
type Override struct {
	Key    string
	Limits []sluice.Limit
}

// LimitsFor returns the limits of key under plan: the first override's
// that matches key, else plan's, else the policy's own.
func (p *Policy) LimitsFor(key, plan string) []sluice.Limit {
	if p.overrideIdx != nil { // parsed: in O(1) plus the patterns
		if i := p.overrideIdx.first(p.Overrides, key); i >= 0 {
			return p.Overrides[i].Limits
		}
	} else {
		for _, o := range p.Overrides { // a Policy made by hand
			if MatchKey(o.Key, key) {
				return o.Limits
			}
		}
	}
	if ls, ok := p.Plans[plan]; ok && plan != "" {
		return ls
	}
	return p.Limits
}

// HasPlan reports whether plan names one of p's plans.
func (p *Policy) HasPlan(plan string) bool {
	_, ok := p.Plans[plan]
	return ok
}

// MatchKey reports whether key matches the override pattern pattern.
func MatchKey(pattern, key string) bool {
	// Backtracking on the last star only: linear in practice, at worst
	// len(pattern) × len(key).
	pi, ki, star, mark := 0, 0, -1, 0
	for ki < len(key) {
		switch {
		case pi < len(pattern) && pattern[pi] == '*':
			star, mark = pi, ki
			pi++
		case pi < len(pattern) && pattern[pi] == '\\' && pi+1 < len(pattern) && pattern[pi+1] == key[ki]:
			pi, ki = pi+2, ki+1
		case pi < len(pattern) && pattern[pi] != '\\' && (pattern[pi] == '?' || pattern[pi] == key[ki]):
			pi, ki = pi+1, ki+1
		case star >= 0:
			pi, mark = star+1, mark+1
			ki = mark
		default:
			return false
		}
	}
	for pi < len(pattern) && pattern[pi] == '*' {
		pi++
	}
	return pi == len(pattern)
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

// Load reads and parses the file at path, or every *.yaml and *.yml file
// of the directory at path (envoyproxy/ratelimit's runtime directory):
// one domain per file in its format, and at most one file in sluice's
// format for the store, policies and the rest.
func Load(path string) (*Config, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return loadDir(path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// loadDir is Load for a directory.
func loadDir(dir string) (*Config, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.y*ml"))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var cfg *Config
	var problems Problems
	var domainFiles []*Config
	for _, name := range names {
		// A dot file is an editor's (a lock, a backup) or a tool's, not
		// the operator's: envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES.
		if ext := filepath.Ext(name); ext != ".yaml" && ext != ".yml" || strings.HasPrefix(filepath.Base(name), ".") {
			continue
		}
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		c, err := Parse(name, data)
		var ps Problems
		switch {
		case errors.As(err, &ps):
			problems = append(problems, ps...)
			continue
		case err != nil:
			return nil, err
		}
		if !isDomainFile(data) {
			if cfg != nil {
				problems = append(problems, Problem{File: name, Line: 1, Column: 1,
					Msg: fmt.Sprintf("a second file in sluice's format (the first is %s): a directory holds one, and domain files", cfg.File)})
				continue
			}
			cfg = c
			continue
		}
		domainFiles = append(domainFiles, c)
	}
	if cfg == nil {
		cfg = &Config{File: dir, Domains: map[string]*Domain{}}
		cfg.Store = (&checker{}).store(nil, defaults.store)
		cfg.Listeners, cfg.Envoy, cfg.Metrics, cfg.UI = Listeners(defaults.listeners), Envoy(defaults.envoy), Metrics(defaults.metrics), UI(defaults.ui)
		cfg.Reservations = (&checker{}).reservations(nil, defaults.reserve)
	}
	for _, c := range domainFiles {
		for name, d := range c.Domains {
			if _, dup := cfg.Domains[name]; dup {
				problems = append(problems, Problem{File: c.File, Line: 1, Column: 1, Field: "domain", Msg: fmt.Sprintf("domain %q is defined twice", name)})
			}
			cfg.Domains[name] = d
		}
	}
	if len(problems) > 0 {
		return nil, problems
	}
	if len(cfg.Policies) == 0 && len(cfg.Domains) == 0 {
		return nil, Problems{{File: dir, Line: 1, Column: 1, Msg: "no policies and no domains in the directory's *.yaml files"}}
	}
	return cfg, nil
}

// isDomainFile reports whether data is an envoyproxy/ratelimit domain file:
// a top-level domain key.
func isDomainFile(data []byte) bool {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 {
		return false
	}
	return root.Content[0].Kind == yaml.MappingNode && hasKey(root.Content[0], "domain")
}

// fileYAML is the file's top level.
type fileYAML struct {
	Store          storeYAML       `yaml:"store"`
	Listeners      listenersYAML   `yaml:"listeners"`
	Envoy          envoyYAML       `yaml:"envoy"`
	Metrics        metricsYAML     `yaml:"metrics"`
	UI             uiYAML          `yaml:"ui"`
	Admin          adminYAML       `yaml:"admin"`
	ForwardAuth    forwardAuthYAML `yaml:"forward_auth"`
	Reservations   reserveYAML     `yaml:"reservations"`
	Policies       []*yaml.Node    `yaml:"policies"`
	Domains        []*yaml.Node    `yaml:"domains"`
	TrustedProxies []*yaml.Node    `yaml:"trusted_proxies"`
}

type reserveYAML struct {
	MaxBytes          byteSize `yaml:"max_bytes"`
	MaxBytesPerPolicy byteSize `yaml:"max_bytes_per_policy"`
	MaxBytesPerKey    byteSize `yaml:"max_bytes_per_key"`
}

type forwardAuthYAML struct {
	DenyStatus     int    `yaml:"deny_status"`
	RequestHeaders string `yaml:"request_headers"`
}

// storeYAML is the store section as written: flat, every mode's fields
// side by side, read into one type per kind and mode by store.
type storeYAML struct {
	Type           string          `yaml:"type"`
	URL            string          `yaml:"url"`
	Prefix         string          `yaml:"prefix"`
	TLS            RedisTLS        `yaml:"tls"`
	PasswordFile   string          `yaml:"password_file"`
	Schema         string          `yaml:"schema"`
	Durable        bool            `yaml:"durable"`
	Timeout        time.Duration   `yaml:"timeout"`
	FailMode       sluice.FailMode `yaml:"fail_mode"`
	MaxKeys        int             `yaml:"max_keys"`
	MaxBytes       byteSize        `yaml:"max_bytes"`
	Mode           string          `yaml:"mode"`
	SyncInterval   time.Duration   `yaml:"sync_interval"`
	Instances      int             `yaml:"instances"`
	Peers          []string        `yaml:"peers"`
	Self           string          `yaml:"self"`
	MemberInterval time.Duration   `yaml:"member_interval"`
	Gossip         *gossipYAML     `yaml:"gossip"`
	PeerListen     string          `yaml:"peer_listen"`
	PeerTLS        PeerTLS         `yaml:"peer_tls"`
	PeerSecretFile string          `yaml:"peer_secret_file"`
}

type listenersYAML struct {
	ReadHeaderTimeout   time.Duration `yaml:"read_header_timeout"`
	ReadTimeout         time.Duration `yaml:"read_timeout"`
	WriteTimeout        time.Duration `yaml:"write_timeout"`
	ProxyTimeout        time.Duration `yaml:"proxy_timeout"`
	IdleTimeout         time.Duration `yaml:"idle_timeout"`
	UpstreamIdleTimeout time.Duration `yaml:"upstream_idle_timeout"`
	MaxHeaderBytes      int           `yaml:"max_header_bytes"`
	MaxConnections      int           `yaml:"max_connections"`
	MaxStreams          int           `yaml:"max_streams"`
	Drain               time.Duration `yaml:"drain"`
	TLS                 ListenersTLS  `yaml:"tls"`
}

type uiYAML struct {
	TopKeys int `yaml:"top_keys"`
}

type metricsYAML struct {
	NearLimitRatio float64 `yaml:"near_limit_ratio"`
}

type envoyYAML struct {
	ResponseHeaders bool   `yaml:"response_headers"`
	LimitHeader     string `yaml:"limit_header"`
	RemainingHeader string `yaml:"remaining_header"`
	ResetHeader     string `yaml:"reset_header"`
	ShadowMode      bool   `yaml:"shadow_mode"`
	QuotaMode       bool   `yaml:"quota_mode"`
}

type gossipYAML struct {
	Bind    string   `yaml:"bind"`
	Join    []string `yaml:"join"`
	KeyFile string   `yaml:"key_file"`
}

type adminYAML struct {
	Token string `yaml:"token"`
}

type policyYAML struct {
	Name     string          `yaml:"name"`
	Limit    *sluice.Limit   `yaml:"limit"`
	Limits   []sluice.Limit  `yaml:"limits"`
	Key      string          `yaml:"key"`
	Secret   *bool           `yaml:"secret"`
	Match    string          `yaml:"match"`
	Cost     costYAML        `yaml:"cost"`
	FailMode sluice.FailMode `yaml:"fail_mode"`
	Missing  string          `yaml:"missing"`
	Shadow   bool            `yaml:"shadow"`
	Shape    bool            `yaml:"shape"`

	Concurrency     int64         `yaml:"concurrency"`
	ConcurrencyWait time.Duration `yaml:"concurrency_wait"`
	ChargeStatus    []int         `yaml:"charge_status"`

	Overrides []*yaml.Node `yaml:"overrides"`
	Plans     *yaml.Node   `yaml:"plans"`
	PlanFrom  string       `yaml:"plan_from"`
}

// costYAML is a policy's cost: a number (what each request takes), or
// {estimate, from}: the estimate taken before the answer, settled to
// what the answer reports (httplimit.ParseCostSource).
type costYAML struct {
	Estimate int64  `yaml:"estimate"`
	From     string `yaml:"from"`
	Unread   int64  `yaml:"unread"`
}

func (c costYAML) String() string {
	if c.From == "" {
		return strconv.FormatInt(c.Estimate, 10)
	}
	if c.Unread != 0 {
		return fmt.Sprintf("{estimate: %d, from: %s, unread: %d}", c.Estimate, c.From, c.Unread)
	}
	return fmt.Sprintf("{estimate: %d, from: %s}", c.Estimate, c.From)
}

type overrideYAML struct {
	Key    string     `yaml:"key"`
	Limit  *yaml.Node `yaml:"limit"`
	Limits *yaml.Node `yaml:"limits"`
}

// Parse parses data, read from file, reporting every problem at once as
// Problems.
func Parse(file string, data []byte) (*Config, error) {
	c := &checker{file: file}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		line, col := syntaxPosition(data, err)
		return nil, Problems{{File: file, Line: line, Column: col, Msg: syntaxMessage(err)}}
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
		cfg.Store = c.store(nil, defaults.store)
		cfg.Listeners = Listeners(defaults.listeners)
		cfg.Envoy, cfg.Metrics, cfg.UI = Envoy(defaults.envoy), Metrics(defaults.metrics), UI(defaults.ui)
		cfg.Reservations = c.reservations(nil, defaults.reserve)
	} else {
		f := fileYAML{Store: defaults.store, Listeners: defaults.listeners, Envoy: defaults.envoy, Metrics: defaults.metrics, UI: defaults.ui,
			ForwardAuth: defaults.forwardAuth, Reservations: defaults.reserve}
		c.hoistStoreSection(doc)
		m := c.decodeInto(doc, "", &f)
		cfg.Store = c.store(m["store"], f.Store)
		cfg.Listeners = c.listeners(m["listeners"], f.Listeners)
		cfg.Envoy, cfg.Metrics, cfg.UI = Envoy(f.Envoy), Metrics(f.Metrics), UI(f.UI)
		if cfg.UI.TopKeys < 0 || cfg.UI.TopKeys > 1000 {
			c.add(m["ui"], "ui.top_keys", "%d: want 0 (keep no keys) to 1000", cfg.UI.TopKeys)
		}
		if r := cfg.Metrics.NearLimitRatio; r <= 0 || r > 1 {
			c.add(m["metrics"], "metrics.near_limit_ratio", "%v: want a share above 0 and at most 1, such as 0.8", r)
		}
		for i, n := range f.TrustedProxies {
			field := fmt.Sprintf("trusted_proxies[%d]", i)
			v, _ := c.scalar(n, field)
			if _, err := clientip.RightmostUntrusted("X-Forwarded-For", []string{v}, clientip.Options{}); err != nil {
				c.add(n, field, "%q is not an address or CIDR", v)
			}
			cfg.TrustedProxies = append(cfg.TrustedProxies, v)
		}
		cfg.Admin = Admin{Token: f.Admin.Token}
		cfg.Reservations = c.reservations(m["reservations"], f.Reservations)
		if cfg.ForwardAuth = ForwardAuth(f.ForwardAuth); cfg.ForwardAuth.DenyStatus != 429 && cfg.ForwardAuth.DenyStatus != 403 {
			c.add(m["forward_auth"], "forward_auth.deny_status", "%d: want 429 or 403", cfg.ForwardAuth.DenyStatus)
		}
		switch cfg.ForwardAuth.RequestHeaders {
		case "", RequestHeadersOriginal, RequestHeadersForwarded:
		default:
			c.add(m["forward_auth"], "forward_auth.request_headers", "%q: want %s (nginx) or %s (Caddy, Traefik, HAProxy)",
				cfg.ForwardAuth.RequestHeaders, RequestHeadersOriginal, RequestHeadersForwarded)
		}
		c.policies(f.Policies, cfg)
		for i, n := range f.Domains {
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

// syntaxPosition finds where a file that YAML cannot parse goes wrong:
// the first line whose addition to the lines above it makes them fail to
// parse (YAML's own report names the line where the enclosing list or
// mapping began, often line 1), at its first non-blank column.
func syntaxPosition(data []byte, err error) (line, col int) {
	lines := strings.SplitAfter(string(data), "\n")
	line = lineOf(err)
	if len(lines) <= 5000 {
		var prefix strings.Builder
		var v yaml.Node
		for i, l := range lines {
			prefix.WriteString(l)
			if yaml.Unmarshal([]byte(prefix.String()), &v) != nil {
				line = i + 1
				break
			}
		}
	}
	col = 1
	if line-1 < len(lines) {
		col += len(lines[line-1]) - len(strings.TrimLeft(lines[line-1], " \t"))
	}
	return line, col
}

// syntaxMessage says what YAML found wrong in sluice's words, keeping
// YAML's for the rest.
func syntaxMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if _, rest, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "line ") {
		msg = rest
	}
	for yamlSays, we := range map[string]string{
		"did not find expected '-' indicator":            "this line does not line up with the list above it: check its indentation",
		"did not find expected key":                      "this line does not line up with the fields above it: check its indentation",
		"mapping values are not allowed in this context": "a ':' where a value was expected: quote the value, or check the indentation",
		"found unexpected end of stream":                 "the file ends inside a quoted value or a bracket",
		"found character that cannot start any token":    "a character that cannot start a value (a tab used for indentation?)",
	} {
		if strings.Contains(msg, yamlSays) {
			return we
		}
	}
	return "not valid YAML: " + msg
}

func lineOf(err error) int {
	var line int
	if _, e := fmt.Sscanf(strings.TrimPrefix(err.Error(), "yaml: "), "line %d:", &line); e == nil {
		return line
	}
	return 1
}

// store checks the store section n, decoded into y over the defaults, and
// reads it into the type of its kind and mode, refusing every field that
// its kind or mode does not use, at that field.
func (c *checker) store(n *yaml.Node, y storeYAML) Store {
	m := map[string]*yaml.Node{}
	if n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[n.Content[i].Value] = n.Content[i+1]
		}
	}
	at := func(name string) (*yaml.Node, string) {
		if v := m[name]; v != nil {
			return v, "store." + name
		}
		return n, "store." + name
	}
	bad := func(name, format string, args ...any) {
		node, field := at(name)
		c.add(node, field, format, args...)
	}
	s := Store{Timeout: y.Timeout, FailMode: y.FailMode, FailModeSet: m["fail_mode"] != nil, MaxKeys: y.MaxKeys, MaxBytes: int64(y.MaxBytes), Instances: y.Instances}
	if s.Timeout <= 0 {
		bad("timeout", "must be positive")
	}
	if s.MaxKeys <= 0 {
		bad("max_keys", "must be positive")
	}
	if s.MaxBytes < 1<<20 {
		bad("max_bytes", "must be at least 1MiB")
	}
	if s.Instances < 1 {
		bad("instances", "must be at least 1")
	}
	// unused refuses the fields a kind or mode has no use for.
	unused := func(why string, names ...string) {
		for _, name := range names {
			if m[name] != nil {
				bad(name, "%s", why)
			}
		}
	}
	switch y.Type {
	case "memory":
		s.Memory = &MemoryStore{}
		unused("only for type redis or postgres", "url")
		unused("only for type redis", "prefix", "tls", "password_file")
		unused("only for type postgres", "schema", "durable")
	case "postgres":
		s.Postgres = &PostgresStore{URL: y.URL, Schema: y.Schema, Durable: y.Durable}
		unused("only for type redis (PostgreSQL's TLS and password file are the URL's sslmode, sslrootcert, sslcert, sslkey and passfile)", "prefix", "tls", "password_file")
		if y.URL == "" {
			bad("url", "a postgres store needs a url, such as postgres://sluice@127.0.0.1:5432/app")
		}
		if m["schema"] != nil && y.Schema == "" {
			bad("schema", "must not be empty: leave it out for sluice")
		}
	case "redis":
		unused("only for type postgres", "schema", "durable")
		s.Redis = &RedisStore{URL: y.URL, Prefix: y.Prefix, TLS: y.TLS, PasswordFile: y.PasswordFile}
		if m["password_file"] != nil && y.PasswordFile == "" {
			bad("password_file", "must not be empty: leave it out for the URL's password")
		}
		if y.URL == "" {
			bad("url", "a redis store needs a url, such as redis://127.0.0.1:6379")
		}
		if m["prefix"] != nil && y.Prefix == "" {
			bad("prefix", "must not be empty: leave it out for sluice:")
		}
		if (y.TLS.CertFile == "") != (y.TLS.KeyFile == "") {
			bad("tls", "cert_file and key_file go together: give both or neither")
		}
	default:
		bad("type", "%q: want memory, redis or postgres", y.Type)
	}
	shardFields := []string{"peers", "self", "member_interval", "gossip", "peer_listen", "peer_tls", "peer_secret_file"}
	switch y.Mode {
	case "":
		unused("only for mode local-sync", "sync_interval")
		unused("only for mode shard", shardFields...)
	case "local-sync":
		unused("only for mode shard", shardFields...)
		if s.Redis == nil {
			bad("mode", "local-sync syncs local counts with a shared store: use type redis")
			break
		}
		if y.SyncInterval < time.Millisecond {
			bad("sync_interval", "must be at least 1ms")
		}
		s.Redis.LocalSync = &LocalSync{Interval: y.SyncInterval}
	case "shard":
		unused("only for mode local-sync", "sync_interval")
		if s.Memory == nil {
			bad("mode", "shard mode keeps state in each owner's memory: use type memory")
			break
		}
		sh := &Shard{Peers: y.Peers, Self: y.Self, MemberInterval: y.MemberInterval, Listen: y.PeerListen, TLS: y.PeerTLS, SecretFile: y.PeerSecretFile}
		if y.Gossip != nil {
			sh.Gossip = &Gossip{Bind: y.Gossip.Bind, Join: y.Gossip.Join, KeyFile: y.Gossip.KeyFile}
			if sh.Gossip.Bind == "" {
				bad("gossip", "gossip needs bind: the address memberlist listens on")
			}
			if sh.Gossip.KeyFile == "" {
				bad("gossip", "gossip needs key_file: the keys that encrypt it (base64 of 16, 24 or 32 random bytes, one a line); without them any process that reaches bind joins the ring")
			}
		}
		if _, _, err := net.SplitHostPort(sh.Listen); err != nil {
			bad("peer_listen", "%q: want host:port, the peer listener's address", sh.Listen)
		}
		if t := sh.TLS; (t != PeerTLS{}) && (t.CertFile == "" || t.KeyFile == "" || t.CAFile == "") {
			bad("peer_tls", "cert_file, key_file and ca_file go together: each member presents its certificate and verifies the others' with the CA")
		}
		if m["peer_secret_file"] != nil && sh.SecretFile == "" {
			bad("peer_secret_file", "must not be empty: leave it out for peer_tls alone")
		}
		if (sh.TLS == PeerTLS{}) && sh.SecretFile == "" {
			bad("peer_tls", "shard mode needs peer_tls (mutual TLS between members) or peer_secret_file, or both: without either any process that reaches the peer listener can reset, charge and move every key")
		}
		switch {
		case len(sh.Peers) == 0 && sh.Gossip == nil:
			bad("peers", "shard mode needs peers (the members' peer addresses, or dns:NAME:PORT) or gossip: {bind, join, key_file}")
		case len(sh.Peers) > 0 && sh.Gossip != nil:
			bad("gossip", "peers and gossip both find members: use one")
		}
		for i, p := range sh.Peers {
			if rest, ok := strings.CutPrefix(p, "dns:"); ok {
				if _, _, err := net.SplitHostPort(rest); err != nil || len(sh.Peers) > 1 {
					node, field := at("peers")
					c.add(node, fmt.Sprintf("%s[%d]", field, i), "%q: a DNS name is the only peer, as dns:NAME:PORT", p)
				}
			}
		}
		if sh.MemberInterval < 10*time.Millisecond {
			bad("member_interval", "must be at least 10ms")
		}
		s.Memory.Shard = sh
	default:
		bad("mode", "%q: want local-sync, shard, or nothing", y.Mode)
	}
	return s
}

// storeTypes are the store section's types, each of which may hold its
// settings in a section of its own name.
var storeTypes = []string{"memory", "redis", "postgres"}

// hoistStoreSection moves the settings of the store's section named after
// its type (store: {type: redis, redis: {url: ...}}) up into the store
// section, where the flat form has them, refusing a section of another
// type and a setting given in both places.
func (c *checker) hoistStoreSection(doc *yaml.Node) {
	var store *yaml.Node
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value == "store" && doc.Content[i+1].Kind == yaml.MappingNode {
			store = doc.Content[i+1]
		}
	}
	if store == nil {
		return
	}
	typ := defaults.store.Type
	for i := 0; i+1 < len(store.Content); i += 2 {
		if store.Content[i].Value == "type" {
			typ = store.Content[i+1].Value
		}
	}
	var kept, hoisted []*yaml.Node
	for i := 0; i+1 < len(store.Content); i += 2 {
		k, v := store.Content[i], store.Content[i+1]
		switch {
		case !slices.Contains(storeTypes, k.Value):
			kept = append(kept, k, v)
		case k.Value != typ:
			c.add(k, "store."+k.Value, "the settings of type %s, and the type is %s", k.Value, typ)
		case v.Kind != yaml.MappingNode:
			c.add(v, "store."+k.Value, "want a mapping of the %s store's settings, such as url", k.Value)
		default:
			for j := 0; j+1 < len(v.Content); j += 2 {
				if hasKey(store, v.Content[j].Value) {
					c.add(v.Content[j], "store."+k.Value+"."+v.Content[j].Value, "also given as store.%s: give it once", v.Content[j].Value)
					continue
				}
				hoisted = append(hoisted, v.Content[j], v.Content[j+1])
			}
		}
	}
	store.Content = append(kept, hoisted...)
}

// listeners checks the listeners section n, decoded into y over the
// defaults: every bound must be positive.
// reservations checks the reservations section y, read from n (nil:
// the defaults).
func (c *checker) reservations(n *yaml.Node, y reserveYAML) Reservations {
	r := Reservations{int64(y.MaxBytes), int64(y.MaxBytesPerPolicy), int64(y.MaxBytesPerKey)}
	field := func(name string) *yaml.Node {
		if n != nil && n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == name {
					return n.Content[i+1]
				}
			}
		}
		return nil
	}
	bounds := []struct {
		name string
		v    int64
	}{{"max_bytes", r.MaxBytes}, {"max_bytes_per_policy", r.MaxBytesPerPolicy}, {"max_bytes_per_key", r.MaxBytesPerKey}}
	for i, b := range bounds {
		// The least holds one reservation of the longest key and policy name.
		if b.v < 64<<10 {
			c.add(cmp.Or(field(b.name), n), "reservations."+b.name, "%d: must be at least 64KiB", b.v)
			continue
		}
		// A bound past the one above it: the one the file sets is wrong.
		if i == 0 || b.v <= bounds[i-1].v {
			continue
		}
		if up := bounds[i-1]; field(b.name) != nil || field(up.name) == nil {
			c.add(cmp.Or(field(b.name), n), "reservations."+b.name, "%d: more than reservations.%s (%d)", b.v, up.name, up.v)
		} else {
			c.add(field(up.name), "reservations."+up.name, "%d: less than reservations.%s (%d, its default)", up.v, b.name, b.v)
		}
	}
	return r
}

func (c *checker) listeners(n *yaml.Node, y listenersYAML) Listeners {
	l := Listeners(y)
	at := map[string]*yaml.Node{}
	if n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			at[n.Content[i].Value] = n.Content[i+1]
		}
	}
	for name, v := range map[string]int64{
		"read_header_timeout": int64(l.ReadHeaderTimeout), "read_timeout": int64(l.ReadTimeout),
		"write_timeout": int64(l.WriteTimeout), "proxy_timeout": int64(l.ProxyTimeout),
		"idle_timeout": int64(l.IdleTimeout), "upstream_idle_timeout": int64(l.UpstreamIdleTimeout), "max_header_bytes": int64(l.MaxHeaderBytes),
		"max_connections": int64(l.MaxConnections), "max_streams": int64(l.MaxStreams),
	} {
		if v <= 0 {
			c.add(at[name], "listeners."+name, "must be positive: every listener is bounded")
		}
	}
	if l.Drain < 0 {
		c.add(at["drain"], "listeners.drain", "must not be negative")
	}
	for name, t := range map[string]ListenerTLS{"http": l.TLS.HTTP, "grpc": l.TLS.GRPC, "admin": l.TLS.Admin, "proxy": l.TLS.Proxy} {
		switch {
		case (t.CertFile == "") != (t.KeyFile == ""):
			c.add(at["tls"], "listeners.tls."+name, "cert_file and key_file go together: give both or neither")
		case t.ClientCAFile != "" && t.CertFile == "":
			c.add(at["tls"], "listeners.tls."+name, "client_ca_file needs cert_file and key_file: mutual TLS is TLS first")
		}
	}
	return l
}

func (c *checker) policies(nodes []*yaml.Node, cfg *Config) {
	seen := map[string]bool{}
	for i, pn := range nodes {
		field := fmt.Sprintf("policies[%d]", i)
		y := defaults.policy
		m := c.decodeInto(pn, field, &y)
		p := &Policy{Name: y.Name, Key: y.Key, Match: y.Match, Cost: y.Cost.Estimate, FailMode: y.FailMode, Shadow: y.Shadow, Shape: y.Shape,
			Concurrency: y.Concurrency, ConcurrencyWait: y.ConcurrencyWait, ChargeStatus: y.ChargeStatus}
		if y.Cost.From != "" {
			src, err := httplimit.ParseCostSource(y.Cost.From)
			if err != nil {
				c.add(cmp.Or(m["cost"], pn), field+".cost.from", "%v", err)
			}
			p.CostFrom, p.CostUnread = src, y.Cost.Unread
		}
		for j, code := range y.ChargeStatus {
			if code < 200 || code > 599 {
				c.add(cmp.Or(m["charge_status"], pn), fmt.Sprintf("%s.charge_status[%d]", field, j), "%d is not a status of an answer: want 200 to 599", code)
			}
		}
		if (p.CostFrom.String() != "" || len(p.ChargeStatus) > 0) && len(p.Limits) == 0 && y.Limit == nil && len(y.Limits) == 0 {
			c.add(pn, field+".cost", "charging by the answer needs a limit to charge")
		}
		switch {
		case p.Name == "":
			c.add(pn, field+".name", "required")
		case seen[p.Name]:
			c.add(cmp.Or(m["name"], pn), field+".name", "policy %q is defined twice", p.Name)
		}
		seen[p.Name] = true
		if y.Limit != nil {
			p.Limits = append(p.Limits, *y.Limit)
		}
		p.Limits = append(p.Limits, y.Limits...)
		if len(p.Limits) == 0 && p.Concurrency <= 0 {
			c.add(pn, field+".limit", "required: a limit such as 100/1m, limits: [...], or concurrency: N")
		}
		c.concurrency(m, pn, field, p, cfg)
		c.overrides(y.Overrides, field, p)
		c.plans(m, y, field, p)
		if err := ValidateKeySpec(p.Key); err != nil {
			c.add(cmp.Or(m["key"], pn), field+".key", "%v", err)
		}
		p.SecretKeys = secretKeys(p.Key)
		if y.Secret != nil {
			p.SecretKeys = *y.Secret
		}
		if p.Match != "" {
			if err := httplimit.ValidatePattern(p.Match); err != nil {
				c.add(cmp.Or(m["match"], pn), field+".match", "%v", err)
			}
		}
		if m["cost"] != nil {
			for _, l := range p.Limits {
				if l.Validate() == nil && (p.Cost < 0 || p.Cost > l.Capacity()) {
					c.add(cmp.Or(m["cost"], pn), field+".cost", "%d is outside 0..%d, the capacity of %v", p.Cost, l.Capacity(), l)
					break
				}
				if l.Validate() == nil && (p.CostUnread < 0 || p.CostUnread > l.Capacity()) {
					c.add(cmp.Or(m["cost"], pn), field+".cost.unread", "%d is outside 0..%d, the capacity of %v", p.CostUnread, l.Capacity(), l)
					break
				}
			}
		}
		if mk, err := sluice.ParseMissingKey(y.Missing); err != nil {
			c.add(cmp.Or(m["missing"], pn), field+".missing", "%q: want client_ip, deny or skip", y.Missing)
		} else {
			p.Missing = mk
		}
		if p.Shape {
			for _, l := range p.Limits {
				if l.Algorithm.Resolved() != sluice.LeakyBucket {
					c.add(cmp.Or(m["shape"], pn), field+".shape", "shaping queues requests: its limits must be leaky_bucket, not %v", l.Algorithm.Resolved())
					break
				}
			}
		}
		cfg.Policies = append(cfg.Policies, p)
	}
}

// overrides reads a policy's overrides, refusing a key that can never
// match: empty, past sluice.MaxIdentityLen, invalid UTF-8, ending in a
// lone \, defined twice, or always caught by an earlier pattern.
func (c *checker) overrides(nodes []*yaml.Node, field string, p *Policy) {
	x := &overrideIndex{plain: map[string]int{}}
	seen := map[string]int{}
	p.overrideIdx = x
	for i, n := range nodes {
		f := fmt.Sprintf("%s.overrides[%d]", field, i)
		var y overrideYAML
		m := c.decodeInto(n, f, &y)
		var ls []sluice.Limit
		switch {
		case y.Limit != nil && y.Limits != nil:
			c.add(n, f, "limit and limits are one choice: give one")
		case y.Limit != nil:
			ls = c.limitList(y.Limit, f+".limit")
		case y.Limits != nil:
			ls = c.limitList(y.Limits, f+".limits")
		default:
			c.add(n, f+".limit", "required: the override's limit, or limits: [...]")
		}
		kn := cmp.Or(m["key"], n)
		switch k := y.Key; {
		case k == "":
			c.add(kn, f+".key", "required: the key, or a pattern such as partner-*")
		case len(k) > sluice.MaxIdentityLen:
			c.add(kn, f+".key", "%d bytes: no key is longer than %d, so it can never match", len(k), sluice.MaxIdentityLen)
		case !utf8.ValidString(k) || strings.ContainsRune(k, utf8.RuneError):
			c.add(kn, f+".key", "not valid UTF-8: no key checked is, so it can never match")
		case strings.HasSuffix(k, "\\") && !strings.HasSuffix(k, "\\\\"):
			c.add(kn, f+".key", "%q ends in a lone \\ that quotes nothing: it can never match", k)
		default:
			j, dup := seen[k]
			if !dup && plainKey(k) {
				j = x.first(p.Overrides, unquote(k))
				dup = j >= 0
			}
			if dup {
				c.add(kn, f+".key", "%q can never match: overrides[%d] (%q) matches every key it does, and the first match applies", k, j, p.Overrides[j].Key)
			}
		}
		if _, ok := seen[y.Key]; !ok {
			seen[y.Key] = len(p.Overrides)
		}
		x.add(len(p.Overrides), y.Key)
		p.Overrides = append(p.Overrides, Override{Key: y.Key, Limits: ls})
	}
}

// plainKey reports whether pattern has no wildcard: it matches one key.
func plainKey(pattern string) bool {
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '*', '?':
			return false
		case '\\':
			i++
		}
	}
	return true
}

// unquote returns the one key a plain pattern matches.
func unquote(pattern string) string {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		if pattern[i] == '\\' && i+1 < len(pattern) {
			i++
		}
		b.WriteByte(pattern[i])
	}
	return b.String()
}

// plans reads a policy's plans and plan_from.
func (c *checker) plans(m map[string]*yaml.Node, y policyYAML, field string, p *Policy) {
	if y.Plans != nil {
		if y.Plans.Kind != yaml.MappingNode {
			c.add(y.Plans, field+".plans", "want a mapping of plan names to limits, such as {free: 100/1m, pro: 1000/1m}")
		} else {
			p.Plans = map[string][]sluice.Limit{}
			for i := 0; i+1 < len(y.Plans.Content); i += 2 {
				name, v := y.Plans.Content[i].Value, y.Plans.Content[i+1]
				f := field + ".plans." + name
				if name == "" {
					c.add(y.Plans.Content[i], field+".plans", "a plan needs a name")
				}
				p.Plans[name] = c.limitList(v, f)
			}
		}
	}
	p.PlanFrom = y.PlanFrom
	if n := m["plan_from"]; n != nil {
		name, arg, _ := strings.Cut(y.PlanFrom, ":")
		switch {
		case name != "header" || arg == "":
			c.add(n, field+".plan_from", "%q: want header:NAME, such as header:X-Plan", y.PlanFrom)
		case len(p.Plans) == 0:
			c.add(n, field+".plan_from", "no plans to choose from: add plans")
		}
	}
}

// limitList reads one limit (a string or a mapping) or a list of them.
func (c *checker) limitList(n *yaml.Node, field string) []sluice.Limit {
	if n.Kind != yaml.SequenceNode {
		return []sluice.Limit{c.limit(n, field)}
	}
	if len(n.Content) == 0 {
		c.add(n, field, "an empty list: give at least one limit")
	}
	ls := make([]sluice.Limit, 0, len(n.Content))
	for i, ln := range n.Content {
		ls = append(ls, c.limit(ln, fmt.Sprintf("%s[%d]", field, i)))
	}
	return ls
}

// concurrency checks a policy's concurrency fields.
func (c *checker) concurrency(m map[string]*yaml.Node, pn *yaml.Node, field string, p *Policy, cfg *Config) {
	if n := m["concurrency"]; n != nil {
		switch mode := cfg.Store.Mode(); {
		case p.Concurrency <= 0:
			c.add(n, field+".concurrency", "%d: the requests one key may have in flight must be above 0", p.Concurrency)
		case p.Shadow:
			c.add(n, field+".concurrency", "a shadow policy cannot hold requests: drop shadow or concurrency")
		case mode == "shard" || mode == "local-sync":
			c.add(n, field+".concurrency", "store mode %s keeps no concurrency slots: use the memory or Redis store without a mode", mode)
		}
	}
	if n := m["concurrency_wait"]; n != nil {
		switch {
		case p.ConcurrencyWait < 0:
			c.add(n, field+".concurrency_wait", "must not be negative")
		case p.Concurrency <= 0:
			c.add(n, field+".concurrency_wait", "only with concurrency")
		}
	}
}

type limitYAML struct {
	Algorithm string        `yaml:"algorithm"`
	Rate      int64         `yaml:"rate"`
	Period    time.Duration `yaml:"period"`
	Burst     int64         `yaml:"burst"`
	Count     string        `yaml:"count"` // all or admitted
	Unit      string        `yaml:"unit"`  // calendar: minute, hour, day, week or month
	TZ        string        `yaml:"tz"`    // calendar: an IANA time zone
}

// limit reads "100/1m" (ParseLimit) or a mapping of algorithm, rate,
// period and burst; a calendar's of algorithm, rate, unit and tz.
func (c *checker) limit(n *yaml.Node, field string) sluice.Limit {
	if n.Kind == yaml.ScalarNode {
		l, err := sluice.ParseLimit(n.Value)
		if err != nil {
			c.add(n, field, "%v", strings.TrimPrefix(err.Error(), "sluice: "))
		}
		return l
	}
	var y limitYAML
	m := c.decodeInto(n, field, &y)
	l := sluice.Limit{Rate: y.Rate, Period: y.Period, Burst: y.Burst, CountAll: y.Count == "all"}
	if y.Count != "" && y.Count != "all" && y.Count != "admitted" {
		c.add(cmp.Or(m["count"], n), field+".count", "%q: want all or admitted", y.Count)
	}
	if y.Algorithm != "" {
		a, err := sluice.ParseAlgorithm(y.Algorithm)
		if err != nil {
			c.add(cmp.Or(m["algorithm"], n), field+".algorithm", "%v", strings.TrimPrefix(err.Error(), "sluice: "))
		}
		l.Algorithm = a
	}
	if l.Algorithm == sluice.Calendar && y.Unit != "" {
		cl, err := sluice.ParseLimit(fmt.Sprintf("calendar 1/%s", y.Unit))
		if err != nil {
			c.add(cmp.Or(m["unit"], n), field+".unit", "%q: want minute, hour, day, week or month", y.Unit)
			return l
		}
		if m["period"] != nil {
			c.add(m["period"], field+".period", "a calendar limit takes unit, not period")
		}
		l.Period = cl.Period
	} else if y.Unit != "" {
		c.add(m["unit"], field+".unit", "only for algorithm calendar")
	}
	if y.TZ != "" {
		z, err := sluice.LoadZone(y.TZ)
		if err != nil {
			c.add(m["tz"], field+".tz", "%v", strings.TrimPrefix(err.Error(), "sluice: invalid limit: "))
			return l
		}
		l.Zone = z
	}
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
