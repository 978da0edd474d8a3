// Package server is the sluice daemon: the HTTP JSON API, the Envoy rate
// limit service (gRPC, and its JSON form), health, Prometheus metrics, the
// admin API, and hot reload of the policy file.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/api/sluicev1"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/internal/rotated"
	"github.com/sluicehq/sluice/internal/sample"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/shard"
)

// Options configures a Server.
type Options struct {
	// Config is the policy file's path; "" means the embedded default.
	Config string
	// RedisURL, if set, overrides the config's store with Redis.
	RedisURL string
	// StoreURL, if set, overrides the config's store with the kind its
	// scheme names (postgres://, redis://, ...), before RedisURL.
	StoreURL string
	// HTTPAddr, GRPCAddr and AdminAddr are the listen addresses. The admin
	// API starts only with a token (config admin.token or AdminToken).
	HTTPAddr, GRPCAddr, AdminAddr string
	// AdminToken overrides the config's admin token.
	AdminToken string
	// AdminTokenFile, if set, overrides both: the token in a file read
	// again at each authentication, so that a token rotated in a mounted
	// Secret takes effect, and the old one stops working, without a
	// restart (the last good token stays while the file cannot be read).
	AdminTokenFile *rotated.File[string]
	Logger         *slog.Logger
	// OnReload, if set, is called with each config that a reload put in
	// place (`sluice proxy` rebuilds its handler from it).
	OnReload func(*config.Config)
	// Envoy, if set, replaces the config's envoy section at every load
	// (`-envoy-env` takes it from envoyproxy/ratelimit's environment).
	Envoy *config.Envoy
	// DebugAddr, if set, serves the loaded config and pprof there, as
	// envoyproxy/ratelimit's debug listener does.
	DebugAddr string
	// ForwardAuth, if set, builds the handler of /v1/forward-auth from a
	// config, at start and at each reload (the proxy's decider, which this
	// package does not import); a reload it refuses keeps the previous one.
	ForwardAuth func(*config.Config) (http.Handler, error)
	// TLS, if set, is the TLS of every listener (the -tls-* flags), over
	// the config's listeners.tls.
	TLS *config.ListenerTLS
	// PeerAddr, if set, is the peer listener's address in shard mode (the
	// -peer-listen flag), over the config's store.peer_listen.
	PeerAddr string
	// OpsOnly makes HTTPAddr serve only the operator's endpoints
	// (/metrics, /healthz, /readyz, /healthcheck), or nothing when it is
	// empty, starts no gRPC listener, and skips the drain: for `sluice
	// proxy`, whose own listener serves the traffic and drains it.
	OpsOnly bool
}

// Server is a running sluice service. Its config is swapped atomically on
// reload; its store is fixed at start.
type Server struct {
	opts    Options
	log     *slog.Logger
	cfg     atomic.Pointer[state]
	store   sluice.Store
	guard   *guard.Guard // every front door decides through it
	closer  func()
	metrics *metrics
	ready   atomic.Bool
	// inflight counts checks being decided and answered, for Shutdown.
	inflight atomic.Int64
	logs     *sample.Sampler // sampled lines: unknown domains
	tracing  *tracing        // nil when OTEL_* asks for no traces
	activity *activity       // what the status page shows of the traffic
	history  reloads         // the last loads of the config
	ui       *ui

	mu        sync.Mutex // guards the listeners below
	httpSrv   *http.Server
	adminSrv  *http.Server
	debugSrv  *http.Server
	grpcSrv   *grpc.Server
	recv      *receiveWatch                // the gRPC calls waiting for their request
	fa        atomic.Pointer[http.Handler] // /v1/forward-auth's, from Options.ForwardAuth
	health    *health.Server
	addrs     Addrs
	started   bool // Start has run and Shutdown has not
	storeType string
	local     sluice.Store                          // the memory store peers forward to, in shard mode
	probe     func(context.Context) (string, error) // the store's readiness probe, if it has one (opened.probe)
	slots     bool                                  // the store's sluice.Slots are the concurrency slots
	preflight *preflight                            // the Redis store's preflight's last report, for /readyz
	overrides *overrides.Registry
	reserved  reservations // the API's open reservations
	peers     *peers       // the peer listener, in shard mode

	tlsFiles        tlsFiles               // every TLS file the listeners and peers read again
	listenerRefused *prometheus.CounterVec // by listener and reason
}

// state is one loaded config.
type state struct {
	cfg *config.Config
}

// Addrs are the addresses the server listens on, once started; Peer is
// the peer listener's, in shard mode.
type Addrs struct{ HTTP, GRPC, Admin, Debug, Peer string }

// New loads the config and opens the store. It returns the config's
// problems, every one, when the file is invalid.
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	cfg, err := load(opts)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: opts.Logger, metrics: newMetrics(), logs: sample.New(1), activity: newActivity()}
	s.history.add(true, "")
	s.cfg.Store(&state{cfg: cfg})
	s.registerTLSMetrics()
	s.metrics.reg.MustRegister(s.reservationCollectors()...)
	if f := opts.AdminTokenFile; f != nil {
		s.metrics.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_admin_token_file_errors_total",
			Help: "Reads of the admin token file (-admin-token-file) that failed, each at an admin request: the last token read stays in use; the first of a run is logged."},
			func() float64 { return float64(f.Failures()) }))
	}
	if err := s.openStore(cfg); err != nil {
		return nil, err
	}
	if s.tracing, err = newTracing(context.Background()); err != nil {
		s.closer()
		return nil, err
	}
	if err := s.openGuard(cfg); err != nil {
		s.closer()
		return nil, err
	}
	return s, nil
}

// openGuard makes the decision core on the store: the config's timeout,
// a memory store as the stand-in of fail_mode local, the store's health
// in the log and in metrics.
func (s *Server) openGuard(cfg *config.Config) error {
	var local sluice.Store
	if ip, ok := s.store.(guard.InProcess); !ok || !ip.InProcess() {
		local = memstore.New(memstore.Options{MaxKeys: cfg.Store.MaxKeys, MaxBytes: cfg.Store.MaxBytes})
	}
	m := s.metrics
	store := s.store
	if s.tracing != nil {
		store = tracedStore{Store: store, tracer: s.tracing.tracer}
	}
	g, err := guard.New(store, guard.Options{
		Timeout: cfg.Store.Timeout, Local: local, Instances: cfg.Store.Instances, Logger: s.log,
		OnStoreCall: func(took time.Duration, err error) { m.storeCall("take", took, err) },
	})
	if err != nil {
		return err
	}
	s.guard = g
	for _, state := range []string{"closed", "open", "half-open"} {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_store_breaker", Help: "1 for the store breaker's state: closed (calls go to the store), open (checks are decided by fail_mode), half-open (one call probes).",
			ConstLabels: prometheus.Labels{"state": state}},
			func() float64 {
				if g.Health().Breaker == state {
					return 1
				}
				return 0
			}))
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_failed_checks_total", Help: "Checks decided by their fail_mode because the store failed."},
		func() float64 { return float64(g.Health().FailedChecks) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_replayed_cost_total", Help: "Cost that fail_mode local admitted during outages and the store was told when it recovered (forced takes)."},
		func() float64 { return float64(g.Health().Replayed) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_replayed_given_back_total", Help: "Cost given back during outages (is_negative_hits, settled reservations) beyond what fail_mode local admitted, and given back to the store when it recovered."},
		func() float64 { return float64(g.Health().ReplayedBack) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_replay_dropped_cost_total", Help: "Cost that fail_mode local admitted or gave back during outages for keys past its bound of 100,000, which the store was never told."},
		func() float64 { return float64(g.Health().ReplayDropped) }))
	return nil
}

func load(opts Options) (*config.Config, error) {
	cfg := config.Default()
	if opts.Config != "" {
		var err error
		if cfg, err = config.Load(opts.Config); err != nil {
			return nil, err
		}
	}
	if opts.Envoy != nil {
		cfg.Envoy = *opts.Envoy
	}
	return cfg, nil
}

func (s *Server) state() *state { return s.cfg.Load() }

// Start listens on the configured addresses and serves in the background.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = true
	lim := s.state().cfg.Listeners
	if s.opts.OpsOnly {
		s.ready.Store(true)
		if s.opts.HTTPAddr != "" {
			mux := http.NewServeMux()
			s.ops(mux)
			var err error
			if s.httpSrv, s.addrs.HTTP, err = s.serveOn("metrics", s.opts.HTTPAddr, lim, mux); err != nil {
				return err
			}
		}
		return s.startAdmin(lim)
	}
	if err := s.buildForwardAuth(s.state().cfg); err != nil {
		return fmt.Errorf("forward-auth: %w", err)
	}
	hl, err := s.listen("http", s.opts.HTTPAddr, lim, nil, httpProtos...)
	if err != nil {
		return err
	}
	// The rapid-reset guard reads the HTTP/2 frames: beneath it, TLS.
	gl, err := s.listen("grpc", s.opts.GRPCAddr, lim, func(ln net.Listener) net.Listener { return &guardListener{Listener: ln, onGoAway: s.goneAway} }, "h2")
	if err != nil {
		hl.Close()
		return err
	}
	s.addrs = Addrs{HTTP: hl.Addr().String(), GRPC: gl.Addr().String()}

	s.httpSrv = HTTPServer(s.tracing.httpHandler(s.httpHandler()), lim, false, s.log)
	go s.serveHTTP(s.httpSrv, hl)

	s.recv = newReceiveWatch(lim.ReadTimeout, s.refused)
	s.grpcSrv = grpc.NewServer(append(grpcOptions(lim, s.recv), s.tracing.grpcOptions()...)...)
	rlspb.RegisterRateLimitServiceServer(s.grpcSrv, &rls{s: s})
	sluicev1.RegisterCheckServiceServer(s.grpcSrv, &native{s: s})
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpcSrv, s.health)
	reflection.Register(s.grpcSrv)
	go s.grpcSrv.Serve(gl)
	if ss, ok := s.store.(*shard.Store); ok {
		if err := s.startPeers(ss, lim); err != nil {
			return err
		}
	}

	if err := s.startAdmin(lim); err != nil {
		return err
	}
	if s.opts.DebugAddr != "" {
		if s.debugSrv, s.addrs.Debug, err = s.serveOn("debug", s.opts.DebugAddr, lim, s.debugHandler()); err != nil {
			return err
		}
		if !loopback(s.addrs.Debug) {
			s.log.Warn("the debug listener (pprof, the loaded config; no auth) is reachable beyond this host", "addr", s.addrs.Debug)
		}
	}
	s.ready.Store(true)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	return nil
}

// loopback reports whether a listener's address is reachable only from
// this host.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// buildForwardAuth makes /v1/forward-auth's handler from cfg, when the
// server has a builder for it.
func (s *Server) buildForwardAuth(cfg *config.Config) error {
	if s.opts.ForwardAuth == nil {
		return nil
	}
	h, err := s.opts.ForwardAuth(cfg)
	if err != nil {
		return err
	}
	s.fa.Store(&h)
	return nil
}

// handleForwardAuth serves /v1/forward-auth, every method: see
// proxy.ForwardAuth.
func (s *Server) handleForwardAuth(w http.ResponseWriter, r *http.Request) {
	h := s.fa.Load()
	if h == nil {
		problem(w, http.StatusNotFound, "forward-auth is not served here", "")
		return
	}
	defer s.track()()
	(*h).ServeHTTP(w, r)
}

// refused counts a gRPC call or connection the listener cut, and logs it
// sampled: one line a second per reason, with the count held back.
func (s *Server) refused(reason string) {
	s.metrics.refused.WithLabelValues(reason).Inc()
	if ok, held := s.logs.Allow("grpc:" + reason); ok {
		s.log.Warn("grpc: listener cut a client", "reason", reason, "suppressed", held)
	}
}

// goneAway counts a connection the rapid-reset guard sent away.
func (s *Server) goneAway() { s.refused("too_many_resets") }

// startAdmin starts the admin API and status page when there is a token
// and an address for them. The caller holds s.mu.
func (s *Server) startAdmin(lim config.Listeners) error {
	if token := s.adminToken(); token == "" || s.opts.AdminAddr == "" {
		return nil
	}
	var err error
	s.adminSrv, s.addrs.Admin, err = s.serveOn("admin", s.opts.AdminAddr, lim, s.adminHandler())
	return err
}

// serveOn serves h on a listener at addr (named in its error) in the
// background, and returns the server and the address it listens on.
func (s *Server) serveOn(name, addr string, lim config.Listeners, h http.Handler) (*http.Server, string, error) {
	l, err := s.listen(name, addr, lim, nil, httpProtos...)
	if err != nil {
		return nil, "", err
	}
	srv := HTTPServer(h, lim, false, s.log)
	go s.serveHTTP(srv, l)
	return srv, l.Addr().String(), nil
}

func (s *Server) serveHTTP(srv *http.Server, l net.Listener) {
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error("http server stopped", "error", err)
	}
}

func (s *Server) adminToken() string {
	if f := s.opts.AdminTokenFile; f != nil {
		token, _ := f.Read() // a failure is logged, and the last token stays
		return token
	}
	if s.opts.AdminToken != "" {
		return s.opts.AdminToken
	}
	return s.state().cfg.Admin.Token
}

// Addrs returns the listen addresses, after Start.
func (s *Server) Addrs() Addrs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs
}

// StoreType is "memory" or "redis".
func (s *Server) StoreType() string { return s.storeType }

// Shutdown drains the server. First /readyz answers 503 and gRPC health
// NOT_SERVING for the config's listeners.drain, while checks are still
// served, so that load balancers stop sending new ones; then the listeners
// stop accepting and the checks in flight finish, until ctx ends, when the
// connections still open (a stalled client's, say) are cut. Last the store
// is closed. It returns an error only when checks were still being decided
// when the connections were cut: every check answered is exit 0.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ready.Store(false)
	if ss, ok := s.store.(*shard.Store); ok {
		// Its keys go to the other members with their state, before the
		// drain: meanwhile the peers still sending here are passed on.
		// Not under s.mu: the hand-off is calls to the peers.
		ss.Leave()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = false
	if s.health != nil {
		s.health.Shutdown() // NOT_SERVING
	}
	if drain := s.state().cfg.Listeners.Drain; drain > 0 && s.httpSrv != nil && !s.opts.OpsOnly {
		s.log.Info("draining: /readyz answers 503 while checks are still served", "drain", drain)
		t := time.NewTimer(drain)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	var wg sync.WaitGroup
	for _, srv := range []*http.Server{s.httpSrv, s.adminSrv, s.debugSrv} {
		if srv != nil {
			wg.Go(func() {
				if srv.Shutdown(ctx) != nil {
					srv.Close() // cut what is still open at the deadline
				}
			})
		}
	}
	if s.grpcSrv != nil {
		wg.Go(func() {
			var stopping sync.WaitGroup
			for _, srv := range []*grpc.Server{s.grpcSrv, s.peerServer()} {
				if srv == nil {
					continue
				}
				stopping.Go(func() {
					done := make(chan struct{})
					go func() { srv.GracefulStop(); close(done) }()
					select {
					case <-done:
					case <-ctx.Done():
						srv.Stop()
						<-done
					}
				})
			}
			stopping.Wait()
			s.recv.stop() // it ends stalled calls until the servers have stopped
		})
	}
	wg.Wait()
	s.tracing.shutdown(ctx)
	s.closer()
	if n := s.inflight.Load(); n > 0 {
		return fmt.Errorf("%d checks were cut before they were answered", n)
	}
	return nil
}

// track counts a check in flight from when it is decided until its answer
// is written, for Shutdown; the returned function ends it.
func (s *Server) track() func() {
	s.inflight.Add(1)
	return func() { s.inflight.Add(-1) }
}

// openShard puts a shard.Store in front of the memory store.
func (s *Server) openShard(cfg *config.Config, sh *config.Shard, local sluice.Store, o *opened) error {
	p, err := s.openPeers(sh)
	if err != nil {
		return err
	}
	s.peers = p
	self := sh.Self
	if self == "" {
		self = p.addr
	}
	var members shard.Membership
	closeMembers := func() {}
	switch {
	case sh.Gossip != nil:
		keys, err := readGossipKeys(sh.Gossip.KeyFile)
		if err != nil {
			return err
		}
		g, err := shard.NewGossip(shard.GossipOptions{Self: self, Bind: sh.Gossip.Bind, Join: sh.Gossip.Join, Keys: keys})
		if err != nil {
			return err
		}
		members, closeMembers = g, func() { g.Close() }
	case len(sh.Peers) == 1 && strings.HasPrefix(sh.Peers[0], "dns:"):
		host, port, err := net.SplitHostPort(strings.TrimPrefix(sh.Peers[0], "dns:"))
		if err != nil {
			return fmt.Errorf("store.peers: %q: want dns:NAME:PORT", sh.Peers[0])
		}
		p, _ := strconv.Atoi(port)
		members = shard.DNS(host, p)
	default:
		members = shard.Static(self, sh.Peers, sh.MemberInterval, p.auth.DialOptions()...)
	}
	ss, err := shard.New(shard.Options{Self: self, Members: members, Local: local, Interval: sh.MemberInterval,
		Timeout: cfg.Store.Timeout, Logger: s.log, Auth: p.auth})
	if err != nil {
		return err
	}
	o.store, o.label, o.slots = ss, "memory, shard", false
	o.close = func() { ss.Close(); closeMembers() }
	s.metrics.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_shard_forwarded_total", Help: "Calls forwarded to the owner of their key."},
		func() float64 { return float64(ss.Forwarded()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_shard_handoff_keys_total", Help: "Keys handed to their new owner, with what they used, when membership changed.",
			ConstLabels: prometheus.Labels{"result": "ok"}},
			func() float64 { h, _ := ss.HandedOff(); return float64(h) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_shard_handoff_keys_total", Help: "Keys handed to their new owner, with what they used, when membership changed.",
			ConstLabels: prometheus.Labels{"result": "failed"}},
			func() float64 { _, f := ss.HandedOff(); return float64(f) }))
	return nil
}

// Config returns the config now serving.
func (s *Server) Config() *config.Config { return s.state().cfg }

// Store returns the store the server decides with.
func (s *Server) Store() sluice.Store { return s.store }

// Guard returns the decision core on the store, for the proxy to share.
func (s *Server) Guard() *guard.Guard { return s.guard }

// Overrides returns the runtime overrides the admin API sets.
func (s *Server) Overrides() *overrides.Registry { return s.overrides }

// Slots returns the store's concurrency slots, or nil when its mode keeps
// none (shard, local-sync).
func (s *Server) Slots() guard.Slots {
	if !s.slots {
		return nil
	}
	slots, _ := s.store.(guard.Slots)
	return slots
}
