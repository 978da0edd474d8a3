package redisstore

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/rotated"
	"github.com/sluicehq/sluice/internal/sample"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Prefix starts every key. Default "sluice:".
	Prefix string
	// ReconnectInterval is how often Open retries connecting while Redis
	// is unreachable; calls meanwhile fail at once. Default 200ms, so that
	// a Redis that comes up is used within a second, breaker included.
	ReconnectInterval time.Duration
	// TLS configures TLS: a CA, a client certificate, the server's name.
	// Open also reads it from the URL's tls_* parameters, for the fields
	// not set here.
	TLS TLS
	// PasswordFile is a file holding the password (white space around it
	// dropped) of the URL's user, or of the default user when the URL
	// names none, in place of a password in the URL. It is read again at
	// each new connection, so that a password rotated on disk is used
	// without a restart; a file that cannot be read then, or is empty,
	// leaves the last password read in use (logged). Open also reads it
	// from the URL's password_file parameter. With Sentinel it is Redis's
	// password (the master's and replicas'); the sentinels' own is the
	// URL's sentinel_password, or the file its sentinel_password_file
	// names, read again at each connection to a sentinel as this one is.
	PasswordFile string
	// OnConnect, if set, is called from a goroutine of its own after the
	// client of a Store from Open makes a new connection (the first, and
	// each after a disconnection or a failover), at most once a second:
	// the place to run Preflight again.
	OnConnect func()
	// Logger hears of failed measurements of Redis's clock, which
	// deadlines travel in (the first of a run of failures, then about
	// one a minute, and the one that ends it; ClockErrors counts them
	// all), and of a TLS CA bundle or password file that could not be
	// read again at a new connection (the first of a run, and its end).
	// Default: none.
	Logger *slog.Logger
}

// Errors.
var (
	// ErrCrossSlot is returned by TakeAll on Redis Cluster for an
	// idempotent batch (Request.ID) whose keys hash to different slots: it
	// could apply in one slot and not another.
	ErrCrossSlot = errors.New("redisstore: batch keys span Redis Cluster slots")
	// ErrClosed is returned by the calls of a Store from Open after its
	// Close.
	ErrClosed = fmt.Errorf("redisstore: %w", sluice.ErrStoreClosed)
	// ErrNotConnected is returned while a Store from Open has not reached
	// Redis yet.
	ErrNotConnected = errors.New("redisstore: not connected to Redis")
	// ErrExpired is returned for a call that reached Redis after its
	// caller's deadline: Redis did not apply it.
	ErrExpired = errors.New("redisstore: deadline passed before the call reached Redis; not applied")
	// ErrOverloaded is returned at once, without calling Redis, when
	// maxQueue calls already wait for it.
	ErrOverloaded = errors.New("redisstore: too many calls waiting for Redis")
)

// Store is a sluice.Store on Redis, safe for concurrent use.
type Store struct {
	prefix string

	mu       sync.Mutex
	client   rueidis.Client // nil until connected
	cluster  bool
	owned    bool // opened by Open: Close closes the client
	closed   bool // Close has run, on a Store from Open: no dial again
	opt      rueidis.ClientOption
	lastDial time.Time
	dialErr  error
	retry    time.Duration
	stop     chan struct{}     // closed by Close: OnConnect's goroutine ends
	demoted  *sample.Sampler   // logs the clients closed for a replica's READONLY
	files    []rotated.Counted // the files Open reads again: FileErrors

	batch batcher
	clock clock
	fn    functions
	args  sync.Map     // sluice.Limit → string, see limitArg
	nargs atomic.Int64 // limits cached
	cals  sync.Map     // a calendar sluice.Limit → *calendarArg
}

// calendarArg is a calendar limit's argument while Redis's clock is in
// the window [start, end): the boundaries only change when it ends.
type calendarArg struct {
	start, end int64
	arg        string
}

var _ sluice.Store = (*Store)(nil)

// New returns a Store on a client the caller already has. The caller keeps
// ownership: Close does not close it.
func New(client rueidis.Client, opts Options) *Store {
	s := newStore(opts)
	s.client = client
	s.cluster = client.Mode() == rueidis.ClientModeCluster
	return s
}

func newStore(opts Options) *Store {
	s := &Store{prefix: opts.Prefix, retry: opts.ReconnectInterval, demoted: sample.New(1)}
	s.clock.log = opts.Logger
	s.batch.freed = make(chan struct{}, 1) // made once: release reads it without the lock
	if s.prefix == "" {
		s.prefix = "sluice:"
	}
	if s.retry <= 0 {
		s.retry = 200 * time.Millisecond
	}
	return s
}

// Open returns a Store on a client it opens from rawURL:
//
//	redis://[user:password@]host:port[/db][?addr=host2:port2...]
//	rediss://...                          (TLS, verified with the system's CAs)
//	rediss://...?tls_ca_file=ca.crt&tls_cert_file=c.crt&tls_key_file=c.key&tls_server_name=name
//	redis://...?prefix=staging:          (Options.Prefix, where that is not set)
//	redis://user@host:port?password_file=/run/secrets/redis  (Options.PasswordFile)
//	redis-sentinel://[user:password@]host:port[,host:port...]/master-name[?sentinel_username=u&sentinel_password=p]
//	redis-sentinel://user@host:port/master-name?password_file=/run/secrets/redis&sentinel_password_file=/run/secrets/sentinel
//	redis://host1:port1,host2:port2       (a Cluster seed list; Cluster is detected)
//
// It returns an error only for a URL it cannot parse. When Redis is
// unreachable it still returns: calls fail at once with an error wrapping
// ErrNotConnected, and the connection is retried every ReconnectInterval.
func Open(rawURL string, opts Options) (*Store, error) {
	var files []rotated.Counted
	opt, prefix, err := parseURL(rawURL, opts.TLS, opts.PasswordFile, opts.Logger, &files)
	if err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = prefix
	}
	opt.ReadBufferEachConn, opt.WriteBufferEachConn = connBuffer, connBuffer
	opt.RingScaleEachConn = ringScale
	s := newStore(opts)
	s.owned, s.opt, s.files = true, opt, files
	s.watchDials(opts.OnConnect)
	s.mu.Lock()
	s.dialLocked()
	s.mu.Unlock()
	return s, nil
}

// connBuffer is each connection's read and write buffer. A check's
// command and answer are a few hundred bytes, and a batch of maxBatch
// checks under 16 KiB, so a batch goes in one write; a longer write skips
// the buffer. rueidis's default, 0.5 MiB each, costs a megabyte a
// connection.
const connBuffer = 16 << 10

// ringScale sizes each connection's ring of commands in flight: 2^8. A
// store sends at most maxInFlight script calls at once, and a batch a
// millisecond past them, so a few dozen are in flight even to a far
// Redis; rueidis's default, 2^10, holds 700 KB of slots over four
// connections, a sixth of the service's live heap under load.
const ringScale = 8

// rueidisParams are the URL parameters rueidis.ParseURL reads; Open refuses
// any other it does not read itself, rather than ignore a misspelt one.
var rueidisParams = []string{"addr", "db", "dial_timeout", "write_timeout", "protocol", "client_cache", "max_retries", "client_name", "master_set", "skip_verify"}

// sentinelRefresh is how often a Sentinel client asks the sentinels which
// server is the master, besides following their +switch-master events: a
// missed event (sentinels reconfigured, a subscription lost at the wrong
// moment) would otherwise leave every call on the old master, a read-only
// replica now, until a restart.
const sentinelRefresh = 5 * time.Second

// parseURL reads raw, with t and the URL's tls_* parameters as its TLS
// and passwordFile or its password_file parameter as its password, and
// returns its prefix parameter; log hears of a CA bundle, certificate or
// password file that cannot be read again, and files gets each of them.
func parseURL(raw string, t TLS, passwordFile string, log *slog.Logger, files *[]rotated.Counted) (opt rueidis.ClientOption, prefix string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return opt, "", fmt.Errorf("redisstore: %w", withoutURL(err))
	}
	query := u.RawQuery
	if t, err = tlsFromURL(u, t); err != nil {
		return opt, "", err
	}
	q := u.Query()
	prefix = q.Get("prefix")
	sentinelUser, sentinelPass, sentinelFile := q.Get("sentinel_username"), q.Get("sentinel_password"), q.Get("sentinel_password_file")
	if passwordFile == "" {
		passwordFile = q.Get("password_file")
	}
	for _, name := range []string{"prefix", "sentinel_username", "sentinel_password", "sentinel_password_file", "password_file"} {
		q.Del(name)
	}
	var unknown []string
	for name := range q {
		if !slices.Contains(rueidisParams, name) || strings.HasPrefix(u.Scheme, "redis-sentinel") {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return opt, "", fmt.Errorf("redisstore: unknown URL parameters %v: want prefix, tls_*, password_file, sentinel_username, sentinel_password, sentinel_password_file, or rueidis's %v (not on redis-sentinel://)", unknown, rueidisParams)
	}
	u.RawQuery = q.Encode()
	if u.RawQuery != query {
		raw = u.String()
	}
	if opt, err = parseRest(raw); err != nil {
		return opt, "", err
	}
	if opt.Sentinel.MasterSet != "" {
		opt.Sentinel.Username, opt.Sentinel.Password = sentinelUser, sentinelPass
		opt.Sentinel.TopologyRefreshInterval = sentinelRefresh
	} else if sentinelUser != "" || sentinelPass != "" || sentinelFile != "" {
		return opt, "", errors.New("redisstore: sentinel_username, sentinel_password and sentinel_password_file are for Sentinel: a redis-sentinel:// URL, or one with master_set")
	}
	if t.set() {
		var ca *rotated.File[*x509.CertPool]
		if opt.TLSConfig, ca, err = t.config(opt.TLSConfig, log, files); err != nil {
			return opt, "", err
		}
		if ca != nil {
			opt.DialCtxFn = caDialer(ca, opt.DialCtxFn)
		}
		if t.ServerName == "" {
			// Each connection's own host, not the first of a seed list.
			opt.TLSConfig.ServerName = ""
		}
		if opt.Sentinel.MasterSet != "" {
			opt.Sentinel.TLSConfig = opt.TLSConfig
		}
	}
	if passwordFile != "" || sentinelFile != "" {
		// Last: the sentinels' connections are marked over TLS and the
		// CA bundle's dialer.
		if err := useCredentialFiles(&opt, passwordFile, sentinelFile, log, files); err != nil {
			return opt, "", err
		}
	}
	return opt, prefix, nil
}

func parseRest(raw string) (rueidis.ClientOption, error) {
	if rest, ok := strings.CutPrefix(raw, "redis-sentinel://"); ok {
		u, err := url.Parse("redis://" + rest)
		if err != nil {
			return rueidis.ClientOption{}, fmt.Errorf("redisstore: sentinel URL: %w", withoutURL(err))
		}
		master := strings.Trim(u.Path, "/")
		if master == "" {
			return rueidis.ClientOption{}, errors.New("redisstore: sentinel URL names no master: want redis-sentinel://host:port/master-name")
		}
		opt := rueidis.ClientOption{InitAddress: strings.Split(u.Host, ",")}
		opt.Sentinel.MasterSet = master
		if u.User != nil {
			opt.Username = u.User.Username()
			opt.Password, _ = u.User.Password()
		}
		return opt, nil
	}
	// A comma-separated host list becomes a seed list.
	var extra []string
	if u, err := url.Parse(raw); err == nil && strings.Contains(u.Host, ",") {
		hosts := strings.Split(u.Host, ",")
		u.Host, extra = hosts[0], hosts[1:]
		raw = u.String()
	}
	opt, err := rueidis.ParseURL(raw)
	if err != nil {
		return opt, fmt.Errorf("redisstore: %w", withoutURL(err))
	}
	opt.InitAddress = append(opt.InitAddress, extra...)
	return opt, nil
}

// withoutURL is err without the URL it quotes, which may hold a password:
// a *url.Error names its URL, and rueidis's errors quote the URL's parts.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("the URL does not parse: %w", ue.Err)
	}
	return err
}

// dialLocked tries to connect. The caller holds s.mu.
func (s *Store) dialLocked() {
	s.lastDial = time.Now()
	c, err := rueidis.NewClient(s.opt)
	if err != nil {
		s.dialErr = err
		return
	}
	s.client, s.dialErr = c, nil
	s.cluster = c.Mode() == rueidis.ClientModeCluster
	s.clock.next.Store(0) // a new client: measure again at the next call
}

// replicaNow closes client, when it is the store's own from a redis://
// URL, because the server it reached answered READONLY: a primary
// demoted to a replica keeps its clients' connections open, while the
// name they dialled (a managed Redis's primary endpoint) now leads to the
// server promoted in its place. The next call dials the URL again (at
// most every ReconnectInterval, while the name still leads to the
// replica). A Sentinel client follows the sentinels instead, and a
// Cluster client MOVED answers.
func (s *Store) replicaNow(client rueidis.Client, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.owned || s.closed || s.cluster || s.opt.Sentinel.MasterSet != "" || s.client != client {
		return
	}
	s.client = nil
	go func() {
		// The own connection is one of client's, to the replica: given
		// back once what is on it ends (perhaps this very call), so that
		// no measurement or lone call uses it again.
		s.clock.own.close()
		client.Close() // it waits for the calls in flight, which the replica refuses
	}()
	if ok, suppressed := s.demoted.Allow(""); ok && s.clock.log != nil {
		s.clock.log.Warn("redisstore: Redis answered READONLY: the server is a replica now; connecting to the URL's address again",
			"error", err, "suppressed", suppressed)
	}
}

// conn returns the client, dialling again if Open has not connected yet and
// the last attempt is older than ReconnectInterval.
func (s *Store) conn() (rueidis.Client, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false, ErrClosed
	}
	if s.client == nil && s.owned && time.Since(s.lastDial) >= s.retry {
		s.dialLocked()
	}
	if s.client == nil {
		return nil, false, fmt.Errorf("%w: %v%s", ErrNotConnected, s.dialErr, s.tlsHint())
	}
	return s.client, s.cluster, nil
}

// tlsHint is a word on a failed dial over TLS without a client
// certificate: under TLS 1.3 a server that requires one resets the
// connection after the handshake, and the error does not say why.
func (s *Store) tlsHint() string {
	c := s.opt.TLSConfig
	if c == nil || c.GetClientCertificate != nil || len(c.Certificates) > 0 || s.dialErr == nil {
		return ""
	}
	if msg := s.dialErr.Error(); strings.Contains(msg, "reset by peer") || strings.Contains(msg, "EOF") || strings.Contains(msg, "certificate required") {
		return " (the server may require a client certificate, tls-auth-clients yes: give tls_cert_file and tls_key_file)"
	}
	return ""
}

// Client returns the store's Redis client once it is connected, for
// what shares the store's Redis (sluice serve's runtime overrides).
func (s *Store) Client() (rueidis.Client, error) {
	c, _, err := s.conn()
	return c, err
}

// Prefix returns the prefix of the store's keys.
func (s *Store) Prefix() string { return s.prefix }

// FileErrors returns how many times a file Open was given (the password
// file, the TLS CA bundle, the client certificate and key) could not be
// read again, each time leaving the last good one in use; 0 for a Store
// from New.
func (s *Store) FileErrors() uint64 {
	var n uint64
	for _, f := range s.files {
		n += f.Failures()
	}
	return n
}

// ClockErrors returns how many measurements of Redis's clock (TIME) have
// failed. A call's deadline travels to Redis in Redis's time, so that a
// call reaching Redis after its caller gave up is not applied; until the
// clock is first measured, calls carry no deadline, and after that they
// keep the last measurement. Failures that are the caller's own context
// ending are not counted.
func (s *Store) ClockErrors() uint64 { return s.clock.failures.Load() }

// Close gives back the store's own connection to its client, and closes
// the client if Open opened it; later calls on a store from Open fail with
// ErrClosed, and none dials again.
func (s *Store) Close() {
	s.clock.own.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = s.owned
	if s.stop != nil {
		close(s.stop)
		s.stop = nil
	}
	if s.owned && s.client != nil {
		s.client.Close()
		s.client = nil
	}
}

// Take decides one request in one script call.
func (s *Store) Take(ctx context.Context, req sluice.Request) (d sluice.Decision, err error) {
	err = s.TakeInto(ctx, &req, &d)
	return d, err
}

// TakeInto is Take on a caller's Request, into a caller's Decision: it
// reads *req, sets every field of *d (the zero Decision with an error),
// and keeps neither pointer past its return: a caller that keeps one
// Request and one Decision copies neither on the way down.
func (s *Store) TakeInto(ctx context.Context, req *sluice.Request, d *sluice.Decision) error {
	c := calls.Get().(*call)
	c.one.req[0] = *req
	c.reqs, c.dst, c.keys = c.one.req[:], c.one.dst[:], c.one.keys[:1]
	err := s.take(ctx, c)
	if c.abandoned {
		*d = sluice.Decision{}
		return err // c may still be written: not reused
	}
	if err != nil {
		*d = sluice.Decision{}
	} else {
		*d = c.dst[0]
	}
	*c = call{done: c.done}
	calls.Put(c)
	return err
}

// calls recycles Take's calls, which most Takes would otherwise allocate.
var calls = sync.Pool{New: func() any { return new(call) }}

// TakeAll decides reqs all-or-nothing in one script call. On Cluster, a
// batch whose keys span slots is decided slot by slot (see takeSlots): a
// request any limit denies takes nothing from the others unless a
// concurrent request changed a state in between, and no limit admits more
// than it allows. Two requests with the same key, algorithm and period are
// refused with sluice.ErrDuplicateRequest.
//
// Off Cluster, concurrent calls on the store's clock are coalesced: while
// up to maxInFlight script calls are running, further calls queue and go
// together in the next one, each still all-or-nothing on its own. Under
// load this divides the script's fixed cost in Redis among many decisions;
// alone, a call goes at once.
func (s *Store) TakeAll(ctx context.Context, reqs []sluice.Request, dst []sluice.Decision) error {
	if len(dst) < len(reqs) {
		return fmt.Errorf("redisstore: TakeAll: %d decisions for %d requests", len(dst), len(reqs))
	}
	if len(reqs) == 0 {
		return nil
	}
	return s.take(ctx, &call{reqs: reqs, dst: dst, keys: make([]string, len(reqs), len(reqs)+1)})
}

// take decides c's requests into c's decisions.
func (s *Store) take(ctx context.Context, c *call) error {
	client, cluster, err := s.conn()
	if err != nil {
		return err
	}
	reqs := c.reqs
	for i := range reqs {
		r := &reqs[i]
		if err := r.Validate(); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if !r.Refund.IsZero() && len(reqs) > 1 {
			return fmt.Errorf("%w: request %d", sluice.ErrRefundInBatch, i)
		}
		if !r.Now.Equal(reqs[0].Now) {
			return fmt.Errorf("redisstore: request %d: every request of a batch must have the same Now", i)
		}
		c.keys[i] = s.redisKey(r.Key, r.Limit)
		for j := range i {
			if c.keys[j] == c.keys[i] {
				return fmt.Errorf("%w: requests %d and %d", sluice.ErrDuplicateRequest, j, i)
			}
		}
	}
	if cluster {
		for _, k := range c.keys[1:len(reqs)] {
			if slot(k) != slot(c.keys[0]) {
				return s.takeSlots(ctx, c)
			}
		}
	}
	if id := reqs[0].ID; id != "" {
		// In the first key's slot, so that Cluster runs the group on one node.
		c.keys = append(c.keys, s.prefix+"{"+keyEscaper.Replace(reqs[0].Key)+"}:id:"+id)
	}
	if cluster || !reqs[0].Now.IsZero() {
		now := "-1"
		if !reqs[0].Now.IsZero() {
			// An explicit time is not Redis's: no deadline to compare.
			now = strconv.FormatInt(reqs[0].Now.UnixMicro(), 10)
		} else {
			c.deadline = s.clock.deadline(ctx, client)
		}
		if cluster {
			// Not on a dedicated connection, which is bound to one node
			// and does not follow MOVED while slots migrate.
			s.run(ctx, client, client, now, []*call{c})
		} else {
			s.send(ctx, client, now, []*call{c})
		}
		s.clock.answered(ctx, client, c.err)
		return c.err
	}
	c.deadline = s.clock.deadline(ctx, client)
	err = s.coalesce(ctx, client, c)
	s.clock.answered(ctx, client, err)
	return err
}

// limitArg returns the argument of limit: its algorithm code, rate,
// period (µs) and burst, separated by spaces, which the script also uses as
// the key of its params cache. Formatted once per limit: a service sees
// few limits. A calendar's is its code, its rate and the boundaries of
// the windows before, around and after now (µs, on Redis's clock), which
// the script chooses from by its own clock (scripts/calendar.lua);
// computed once per window.
func (s *Store) limitArg(l sluice.Limit, now string) string {
	if l.Algorithm == sluice.Calendar {
		t := s.clock.around(now)
		if v, ok := s.cals.Load(l); ok {
			if c := v.(*calendarArg); c.start <= t && t < c.end {
				return c.arg
			}
		}
		p := algorithm.ParamsOf(l)
		b2, b3 := p.Window(t)
		b1, _ := p.Window(b2 - 1)
		_, b4 := p.Window(b3)
		c := &calendarArg{start: b2, end: b3, arg: fmt.Sprintf("%d %d %d %d %d %d", sluice.Calendar, p.Rate, b1, b2, b3, b4)}
		if _, ok := s.cals.Load(l); ok || s.nargs.Add(1) <= maxCachedLimits {
			s.cals.Store(l, c) // the window now; bounded as args are
		}
		return c.arg
	}
	if v, ok := s.args.Load(l); ok {
		return v.(string)
	}
	p := algorithm.ParamsOf(l)
	a := fmt.Sprintf("%d %d %d %d", l.Algorithm.Resolved(), p.Rate, p.Period, p.Burst)
	if s.nargs.Add(1) <= maxCachedLimits { // bounded: limits may come from callers
		s.args.Store(l, a)
	}
	return a
}

const maxCachedLimits = 1024

// intArg formats n, without allocating for the usual small ones.
func intArg(n int64) string {
	if n >= 0 && n < int64(len(smallInts)) {
		return smallInts[n]
	}
	return strconv.FormatInt(n, 10)
}

var smallInts = func() (s [64]string) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

// Reset deletes the state of key under limit.
func (s *Store) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	client, _, err := s.conn()
	if err != nil {
		return err
	}
	if err := client.Do(ctx, client.B().Del().Key(s.redisKey(key, limit)).Build()).Error(); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	return nil
}
