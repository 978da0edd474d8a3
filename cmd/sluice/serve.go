package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/buildinfo"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/rotated"
	"github.com/sluicehq/sluice/internal/server"
)

// common are the flags serve and proxy share.
type common struct {
	config, redis, store, logLevel, logFormat string
	tls                                       config.ListenerTLS
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.config, "config", "", "policy file or directory; empty: the embedded default")
	fs.StringVar(&c.redis, "redis", "", "Redis URL, overriding the config's store: redis://, rediss://, redis-sentinel://")
	fs.StringVar(&c.store, "store", "", "store URL, overriding the config's store and -redis, its kind by its scheme: postgres://, postgresql://, redis://, rediss://, redis-sentinel://")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&c.tls.CertFile, "tls-cert", "", "PEM certificate every listener serves TLS with, read again at each handshake; overrides the config's listeners.tls")
	fs.StringVar(&c.tls.KeyFile, "tls-key", "", "PEM private key of -tls-cert")
	fs.StringVar(&c.tls.ClientCAFile, "tls-client-ca", "", "PEM bundle of the CAs whose client certificates every listener requires (mutual TLS); with -tls-cert")
}

// listenerTLS returns the TLS the flags give every listener, or nil when
// they give none (the config's listeners.tls then); false when they do
// not go together (said on stderr).
func (c *common) listenerTLS(stderr io.Writer, cmd string) (*config.ListenerTLS, bool) {
	switch t := c.tls; {
	case t == config.ListenerTLS{}:
		return nil, true
	case t.CertFile == "" || t.KeyFile == "":
		fmt.Fprintf(stderr, "sluice %s: -tls-cert and -tls-key go together; -tls-client-ca needs both\n", cmd)
		return nil, false
	}
	return &c.tls, true
}

func serve(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	httpAddr := fs.String("http", "127.0.0.1:8080", "HTTP listen address: /v1/check, /json, /metrics, /healthz, /readyz")
	grpcAddr := fs.String("grpc", "127.0.0.1:8081", "gRPC listen address: Envoy RLS v3, health, reflection")
	var admin adminFlags
	admin.register(fs, "127.0.0.1:8082")
	peerAddr := fs.String("peer-listen", "", "shard mode: the peer listener's address, where only the members call (overrides store.peer_listen; default 127.0.0.1:8083)")
	envoyEnvFlag := fs.Bool("envoy-env", false, "start from envoyproxy/ratelimit's environment: RUNTIME_ROOT and the rest for the config directory, HOST/PORT, GRPC_HOST/GRPC_PORT, DEBUG_HOST/DEBUG_PORT, REDIS_*, LOG_*, SHADOW_MODE, LIMIT_RESPONSE_HEADERS_ENABLED (docs/envoy.md)")
	drain := fs.Duration("shutdown-timeout", 10*time.Second, "how long draining and in-flight checks may take on SIGINT or SIGTERM")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice serve [flags]\n\nRuns the rate-limit service. With no flags: the embedded policy file and the memory store.\n\nFlags:")
		fs.PrintDefaults()
	}
	cli, code := parseFlags(fs, args, stderr)
	if code >= 0 {
		return code
	}
	var envoy *config.Envoy
	var debugAddr string
	var ee envoyEnv
	if *envoyEnvFlag {
		var err error
		if ee, err = readEnvoyEnv(os.LookupEnv); err != nil {
			fmt.Fprintln(stderr, "sluice serve: -envoy-env:", err)
			return 2
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		// Flags given on the command line (or as SLUICE_* variables) win
		// over envoyproxy/ratelimit's environment.
		for name, p := range map[string]*string{"config": &c.config, "redis": &c.redis, "http": httpAddr, "grpc": grpcAddr, "log-format": &c.logFormat} {
			if !set[name] {
				*p = map[string]string{"config": ee.config, "redis": ee.redis, "http": ee.http, "grpc": ee.grpc, "log-format": ee.logFormat}[name]
			}
		}
		if !set["log-level"] {
			c.logLevel = map[string]string{"trace": "debug", "fatal": "error", "panic": "error"}[ee.logLevel]
			if c.logLevel == "" {
				c.logLevel = ee.logLevel
			}
		}
		envoy, debugAddr = &ee.envoy, ee.debug
	}
	log, err := logger(c.logLevel, c.logFormat, stderr)
	if err != nil {
		fail(stderr, "serve", err)
		return 2
	}
	defer containerMemory(log)()
	if len(ee.unsupported) > 0 {
		log.Warn("-envoy-env: these envoyproxy/ratelimit variables are set and sluice does not support them (docs/envoy.md)", "variables", strings.Join(ee.unsupported, ", "))
	}
	if len(ee.ineffective) > 0 {
		log.Info("-envoy-env: these variables are read and have nothing to do in sluice", "variables", strings.Join(ee.ineffective, "; "))
	}
	if !admin.resolve(cli, log, stderr, "serve") {
		return 2
	}
	listenerTLS, ok := c.listenerTLS(stderr, "serve")
	if !ok {
		return 2
	}
	hup := server.CatchSIGHUP() // before any listener: see WatchReload
	var srv *server.Server
	srv, err = server.New(server.Options{
		Config: c.config, RedisURL: c.redis, StoreURL: c.store, HTTPAddr: *httpAddr, GRPCAddr: *grpcAddr, TLS: listenerTLS, PeerAddr: *peerAddr,
		AdminAddr: admin.addr, AdminToken: admin.token, AdminTokenFile: admin.file, Logger: log, Envoy: envoy, DebugAddr: debugAddr,
		// /v1/forward-auth decides as `sluice proxy` does: its decider,
		// on this server's Guard, counted in its metrics.
		ForwardAuth: func(cfg *config.Config) (http.Handler, error) {
			return proxy.ForwardAuth(cfg, proxy.Deps{Guard: srv.Guard(), Slots: srv.Slots(), Overrides: srv.Overrides(), Accounting: srv}, log)
		},
	})
	if err != nil {
		fmt.Fprintln(stderr, "sluice serve: cannot start:\n"+err.Error())
		return 1
	}
	if err := srv.Start(); err != nil {
		fail(stderr, "serve", err)
		return 1
	}
	a := srv.Addrs()
	source := c.config
	if source == "" {
		source = config.DefaultName
	}
	// Watch before announcing: a change made once the banner is out is seen.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv.WatchReload(ctx, hup)
	build := buildinfo.Read()
	log.Info("sluice serving", "version", build.Version, "revision", build.Revision, "modified", build.Modified, "go", build.Go,
		"http", a.HTTP, "grpc", a.GRPC, "admin", a.Admin, "peer", a.Peer, "store", srv.StoreType(), "config", source,
		"policies", len(srv.Config().Policies), "domains", len(srv.Config().Domains))
	if c.logFormat != "json" {
		// With JSON logs every line is JSON: the record above says it all.
		banner(stdout, build, source, srv.StoreType(), a, srv.Config(), srv.Scheme)
	}

	<-ctx.Done()
	log.Info("shutting down; finishing in-flight checks")
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("shutdown", "error", err)
		return 1
	}
	return 0
}

func proxyCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	listen := fs.String("listen", "127.0.0.1:8090", "listen address")
	metricsAddr := fs.String("metrics", "127.0.0.1:8091", "operator's listen address: /metrics, /healthz, /readyz; empty: none")
	var admin adminFlags
	admin.register(fs, "127.0.0.1:8092")
	upstream := fs.String("upstream", "", "upstream URL to forward allowed requests to; required")
	drain := fs.Duration("shutdown-timeout", 10*time.Second, "how long in-flight requests may take to finish on SIGINT or SIGTERM")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice proxy -upstream URL [flags]\n\nA reverse proxy applying the policy file's policies (match, key, shape) to what it forwards.\n\nFlags:")
		fs.PrintDefaults()
	}
	cli, code := parseFlags(fs, args, stderr)
	if code >= 0 {
		return code
	}
	u, err := url.Parse(*upstream)
	if *upstream == "" || err != nil || u.Host == "" {
		fmt.Fprintln(stderr, "sluice proxy: -upstream must be a URL such as http://127.0.0.1:3000")
		return 2
	}
	log, err := logger(c.logLevel, c.logFormat, stderr)
	if err != nil {
		fail(stderr, "proxy", err)
		return 2
	}
	defer containerMemory(log)()
	if !admin.resolve(cli, log, stderr, "proxy") {
		return 2
	}
	listenerTLS, ok := c.listenerTLS(stderr, "proxy")
	if !ok {
		return 2
	}
	// The handler is rebuilt from each config a reload puts in place and
	// swapped in whole: a request sees one config or the other.
	var handler atomic.Pointer[http.Handler]
	hup := server.CatchSIGHUP() // before any listener: see WatchReload
	var srv *server.Server
	var upstreamConns *http.Transport // one for the process: a reload keeps its connections
	build := func(cfg *config.Config) error {
		h, err := proxy.New(cfg, proxy.Deps{Guard: srv.Guard(), Slots: srv.Slots(), Overrides: srv.Overrides(), Accounting: srv, Transport: upstreamConns}, u, log)
		if err != nil {
			return err
		}
		handler.Store(&h)
		return nil
	}
	srv, err = server.New(server.Options{Config: c.config, RedisURL: c.redis, StoreURL: c.store, Logger: log, TLS: listenerTLS,
		HTTPAddr: *metricsAddr, AdminAddr: admin.addr, AdminToken: admin.token, AdminTokenFile: admin.file, OpsOnly: true,
		OnReload: func(cfg *config.Config) {
			if err := build(cfg); err != nil {
				log.Error("config reload: the proxy keeps its previous policies", "error", err)
			}
		}})
	if err != nil {
		fmt.Fprintln(stderr, "sluice proxy: cannot start:\n"+err.Error())
		return 1
	}
	if srv.Config().Store.Mode() == "shard" {
		fmt.Fprintln(stderr, "sluice proxy: store mode shard needs the peer service of `sluice serve`; run the proxy against a local-sync or Redis store, or in front of `sluice serve`")
		return 2
	}
	upstreamConns = proxy.NewTransport(srv.Config().Listeners)
	if err := build(srv.Config()); err != nil {
		fail(stderr, "proxy", err)
		return 1
	}
	lim := srv.Config().Listeners
	ln, err := srv.ListenProxy(*listen)
	if err != nil {
		fail(stderr, "proxy", err)
		return 1
	}
	if err := srv.Start(); err != nil {
		ln.Close()
		fail(stderr, "proxy", err)
		return 1
	}
	hs := server.HTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*handler.Load()).ServeHTTP(w, r)
	}), lim, true, log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv.WatchReload(ctx, hup) // SIGHUP and file changes, watched before announcing
	a := srv.Addrs()
	fmt.Fprintf(stdout, "sluice proxy listening on %s://%s, forwarding to %s\n", srv.Scheme("proxy"), ln.Addr(), withoutUserinfo(u))
	if a.HTTP != "" {
		fmt.Fprintf(stdout, "  metrics    %s://%s/metrics\n", srv.Scheme("metrics"), a.HTTP)
	}
	if a.Admin != "" {
		fmt.Fprintf(stdout, "  admin      %s://%s/ui/   (bearer token required)\n", srv.Scheme("admin"), a.Admin)
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		fail(stderr, "proxy", err)
		return 1
	case <-ctx.Done():
	}
	log.Info("shutting down; finishing in-flight requests")
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close() // cut what is still open at the deadline
	}
	srv.Shutdown(sctx)
	return 0
}

// validateUsage is `sluice config`'s help.
const validateUsage = "usage: sluice config validate FILE|DIR\n       sluice config defaults\n\nvalidate checks a policy file, or a directory of them, and lists every problem as file:line:column: field: problem; exits 0 when valid, 1 when not. defaults prints every default of the policy file."

func validate(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && isHelp(args[0]) {
		fmt.Fprintln(stdout, validateUsage)
		return 0
	}
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: sluice config validate FILE|DIR")
		return 2
	}
	cfg, err := config.Load(args[0])
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok: %d policies, %d domains, %s store\n", args[0], len(cfg.Policies), len(cfg.Domains), cfg.Store.Type())
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "%s: warning: %s\n", args[0], w)
	}
	return 0
}

// banner tells a person at a terminal where the service listens and how
// to try it, on a policy or domain of cfg.
// scheme says which listeners serve TLS (Server.Scheme).
func banner(stdout io.Writer, build buildinfo.Info, source, store string, a server.Addrs, cfg *config.Config, scheme func(listener string) string) {
	fmt.Fprintf(stdout, `sluice %s serving
  policies   %s
  store      %s
  HTTP       %s://%s   (POST /v1/check, POST /json, /v1/forward-auth, GET /metrics, /healthz, /readyz)
  gRPC       %s          (sluice.v1.CheckService, envoy.service.ratelimit.v3.RateLimitService, grpc.health.v1)
`, build, source, store, scheme("http"), a.HTTP, a.GRPC)
	if a.Peer != "" {
		fmt.Fprintf(stdout, "  peers      %s          (shard members only)\n", a.Peer)
	}
	if a.Admin != "" {
		fmt.Fprintf(stdout, "  admin      %s://%s   (bearer token required)\n", scheme("admin"), a.Admin)
	} else {
		fmt.Fprintln(stdout, "  admin      off (set admin.token or SLUICE_ADMIN_TOKEN)")
	}
	if scheme("http") == "http" { // the hint's curl speaks plain HTTP
		exe, _ := os.Executable()
		fmt.Fprint(stdout, tryIt(cfg, a.HTTP, command(exe)))
	}
}

// tryIt is the banner's hint: a check of cfg's policy named default, or
// of its first, or else an envoyproxy/ratelimit request for its first
// domain's first descriptor.
func tryIt(cfg *config.Config, addr, cmd string) string {
	if len(cfg.Policies) > 0 {
		p := cfg.Policies[0].Name
		if cfg.Policy("default") != nil {
			p = "default"
		}
		return fmt.Sprintf(`Try it:
  curl -s http://%s/v1/check -H 'Content-Type: application/json' -d '{"checks":[{"policy":%q,"key":"alice"}]}'
  %s check -addr %s -policy %s -key alice
`, addr, p, cmd, addr, p)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Domains)) {
		if d := cfg.Domains[name]; len(d.Descriptors) > 0 {
			return fmt.Sprintf(`Try it:
  curl -s http://%s/json -d '{"domain":%q,"descriptors":[{"entries":[{"key":%q,"value":"alice"}]}]}'
`, addr, name, d.Descriptors[0].Key)
		}
	}
	return ""
}

// command returns how a person runs sluice again: "sluice", or, for a
// binary that `go run` built in its cache, "go run ./cmd/sluice".
func command(exe string) string {
	if strings.Contains(filepath.ToSlash(exe), "/go-build") {
		return "go run ./cmd/sluice"
	}
	return "sluice"
}

// adminFlags are the admin API's flags, which serve and proxy share.
type adminFlags struct {
	addr, token, tokenFile string
	file                   *rotated.File[string] // tokenFile, once resolved
}

func (a *adminFlags) register(fs *flag.FlagSet, addr string) {
	fs.StringVar(&a.addr, "admin", addr, "admin API and status page listen address; starts only with a token")
	fs.StringVar(&a.token, "admin-token", "", "admin API bearer token, overriding the config's; on the command line it shows in ps: prefer -admin-token-file or the variable")
	fs.StringVar(&a.tokenFile, "admin-token-file", "", "file holding the admin API bearer token, such as a mounted secret")
}

// resolve reads the token file, if any, which the server reads again at
// each authentication, and warns of a token given on the command line;
// false when the file cannot be used (said on stderr).
func (a *adminFlags) resolve(cli map[string]bool, log *slog.Logger, stderr io.Writer, cmd string) bool {
	warnSecretFlags(cli, log)
	if a.tokenFile != "" {
		f, err := rotated.Open(a.tokenFile, "admin token file", rotated.Text, log)
		if err != nil {
			fmt.Fprintf(stderr, "sluice %s: -admin-token-file: %v\n", cmd, err)
			return false
		}
		a.file = f
		a.token = f.Last() // for what is shown at start
	}
	return true
}

// withoutUserinfo is u as the proxy shows it: its userinfo (a password,
// or a token as the user name) replaced by REDACTED.
func withoutUserinfo(u *url.URL) string {
	if u.User == nil {
		return u.String()
	}
	c := *u
	c.User = url.User("REDACTED")
	return c.String()
}

// warnSecretFlags warns of each secret given on the command line, where
// ps and shell history show it: the admin token, and a password in a
// Redis URL (-redis).
func warnSecretFlags(cli map[string]bool, log *slog.Logger) {
	if cli["admin-token"] {
		log.Warn("the admin token given with -admin-token shows in ps and in shell history; use -admin-token-file or SLUICE_ADMIN_TOKEN")
	}
	for flag, instead := range map[string]string{"redis": "?password_file=FILE, SLUICE_REDIS or the config file's store.url", "store": "SLUICE_STORE, a passfile, or the config file's store.url", "upstream": "SLUICE_UPSTREAM"} {
		if cli[flag] && urlPassword(os.Args, flag) {
			log.Warn("the password given in -"+flag+" shows in ps and in shell history; use "+instead, "flag", flag)
		}
	}
}

// urlPassword reports whether a URL given to flag among args holds a
// password (or does not parse, and so may).
func urlPassword(args []string, flag string) bool {
	for i, a := range args {
		n := strings.TrimLeft(a, "-")
		var v string
		switch {
		case a == n:
			continue
		case n == flag && i+1 < len(args):
			v = args[i+1]
		case strings.HasPrefix(n, flag+"="):
			v = strings.TrimPrefix(n, flag+"=")
		default:
			continue
		}
		if u, err := url.Parse(v); err != nil || u.User != nil || u.Query().Has("sentinel_password") {
			return true
		}
	}
	return false
}
