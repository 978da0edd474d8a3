package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/localsync"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/pgstore"
	"github.com/sluicehq/sluice/redisstore"
)

// storeKinds is the table of the store kinds `sluice serve` opens: the
// config's store.type names a row, and a URL on the command line (-store,
// -redis) picks one by its scheme. A row's open makes the store from the
// config's section of its kind and returns it with what the server needs
// of it (opened): how to close it, its readiness probe, the source of
// runtime overrides, whether it keeps concurrency slots; it registers its
// own metrics. Adding a kind is its package, a row here and its section
// in package config (docs/decisions.md has the checklist).
var storeKinds = []storeKind{
	{name: "memory", open: openMemory},
	{name: "redis", schemes: []string{"redis", "rediss", "redis-sentinel"}, open: openRedis},
	{name: "postgres", schemes: []string{"postgres", "postgresql"}, open: openPostgres},
}

// storeKind is one row of storeKinds.
type storeKind struct {
	name    string
	schemes []string // the URL schemes that name it on the command line
	// open opens the store of cfg's store section; url, when not empty,
	// is the command line's, in place of the section's.
	open func(s *Server, cfg *config.Config, url string) (*opened, error)
}

// opened is a store a kind opened, and what the server needs of it.
type opened struct {
	store sluice.Store
	label string // the kind and mode, for /readyz and the status page: "redis, local-sync"
	close func()
	// probe, if set, is the readiness probe: a line on the store for
	// /readyz, and an error when it is not ready. Without one, /readyz
	// peeks at a key.
	probe func(ctx context.Context) (string, error)
	// overrides is where runtime overrides live: shared through the
	// store, or this process's own (overrides.New).
	overrides *overrides.Registry
	slots     bool         // its guard.Slots are the service's concurrency slots
	local     sluice.Store // the memory store peers forward to, in shard mode
	preflight *preflight   // its preflight's last report, for /readyz
}

// kindOf returns the row of a kind's name, or of a URL's scheme.
func kindOf(name, url string) (storeKind, error) {
	var names []string
	for _, k := range storeKinds {
		if url == "" && k.name == name {
			return k, nil
		}
		for _, sc := range k.schemes {
			if strings.HasPrefix(url, sc+"://") {
				return k, nil
			}
			names = append(names, sc+"://")
		}
	}
	if url != "" {
		return storeKind{}, fmt.Errorf("-store: a URL with a scheme sluice has a store for: %s", strings.Join(names, ", "))
	}
	return storeKind{}, fmt.Errorf("store.type %q: no such store kind", name)
}

// openStore opens the store the command line or the config names.
func (s *Server) openStore(cfg *config.Config) error {
	name, url := cfg.Store.Type(), ""
	switch {
	case s.opts.StoreURL != "":
		url = s.opts.StoreURL
	case s.opts.RedisURL != "":
		url = s.opts.RedisURL
	}
	k, err := kindOf(name, url)
	if err != nil {
		return err
	}
	if m := cfg.Store.Memory; url != "" && m != nil && m.Shard != nil {
		return fmt.Errorf("store: mode shard keeps each key in its owner's memory: a %s URL on the command line does not apply to it", k.name)
	}
	o, err := k.open(s, cfg, url)
	if err != nil {
		return err
	}
	s.store, s.closer, s.storeType = o.store, o.close, o.label
	s.probe, s.overrides, s.slots, s.local, s.preflight = o.probe, o.overrides, o.slots, o.local, o.preflight
	return nil
}

func openMemory(s *Server, cfg *config.Config, _ string) (*opened, error) {
	ms := memstore.New(memstore.Options{MaxKeys: cfg.Store.MaxKeys, MaxBytes: cfg.Store.MaxBytes})
	o := &opened{store: ms, label: "memory", close: func() {}, overrides: overrides.New(), slots: true, local: ms}
	if sh := cfg.Store.Memory.Shard; sh != nil {
		if err := s.openShard(cfg, sh, ms, o); err != nil {
			return nil, err
		}
	}
	s.metrics.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_memstore_keys", Help: "Keys held by the memory store."},
			func() float64 { return float64(ms.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_memstore_bytes", Help: "Heap held by the memory store's keys, as max_bytes counts it."},
			func() float64 { return float64(ms.Bytes()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_memstore_live_evictions_total", Help: "Keys evicted before they were back to full, to stay under max_keys or max_bytes."},
			func() float64 { return float64(ms.Evictions()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_memstore_denying_evictions_total", Help: "Of the live evictions, keys with no capacity left (clients held at a limit), taken because every key looked at had none."},
			func() float64 { return float64(ms.DenyingEvictions()) }))
	return o, nil
}

func openRedis(s *Server, cfg *config.Config, url string) (*opened, error) {
	var opts redisstore.Options
	r := cfg.Store.Redis
	if r != nil {
		t := r.TLS
		opts = redisstore.Options{Prefix: r.Prefix, TLS: redisstore.TLS{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName,
			SkipHostnameVerification: t.SkipHostnameVerification, InsecureSkipVerify: t.InsecureSkipVerify},
			PasswordFile: r.PasswordFile}
		if url == "" {
			url = r.URL
		}
	}
	opts.Logger = s.log
	var pre atomic.Pointer[preflight]
	opts.OnConnect = func() {
		if p := pre.Load(); p != nil {
			p.run(context.Background())
		}
	}
	rs, err := redisstore.Open(url, opts)
	if err != nil {
		return nil, err
	}
	p := newPreflight(rs, overrides.RedisCommands(rs.Prefix()), s.log, s.metrics.reg)
	if r, err := p.run(context.Background()); err != nil {
		s.log.Warn("redis preflight: Redis not reachable yet; checks are decided by fail_mode until it is, and the preflight runs when it connects", "error", err)
	} else if why := decideRefused(r); why != "" {
		if !cfg.Store.FailModeSet {
			rs.Close()
			return nil, fmt.Errorf("store: Redis user %q may not run sluice's decision: %s; or set store.fail_mode (local, open or closed) to start anyway, every check then decided by it", r.User, why)
		}
		s.log.Warn("redis preflight: this Redis user may not run sluice's decision: every check is decided by store.fail_mode", "fail_mode", cfg.Store.FailMode, "user", r.User)
	}
	pre.Store(p)
	follow, stop := context.WithCancel(context.Background())
	go p.every(follow, preflightEvery) // a setting changed on a live server
	ov := overrides.NewShared(follow, rs.Client, rs.Prefix(), s.log)
	for _, e := range []struct {
		reason string
		n      func(overrides.Errors) uint64
	}{
		{"reload", func(e overrides.Errors) uint64 { return e.Reload }},
		{"subscribe", func(e overrides.Errors) uint64 { return e.Subscribe }},
		{"unparsed", func(e overrides.Errors) uint64 { return e.Unparsed }},
	} {
		s.metrics.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_overrides_errors_total",
			Help:        "What went wrong following the runtime overrides in Redis, by reason: reload (reading them failed: the last ones read stay in force), subscribe (the subscription to their changes was lost or refused: they arrive at the next reload, every 5s), unparsed (one did not parse, and was skipped).",
			ConstLabels: prometheus.Labels{"reason": e.reason}},
			func() float64 { return float64(e.n(ov.Errors())) }))
	}
	s.metrics.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_redis_clock_errors_total",
		Help: "Measurements of Redis's clock (TIME) that failed: deadlines travel to Redis in its time, so until one succeeds calls carry none, and after that they keep the last."},
		func() float64 { return float64(rs.ClockErrors()) }))
	s.metrics.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_redis_file_errors_total",
		Help: "Reads of the store's password_file, TLS ca_file or client certificate and key that failed, each at a new connection: the last good one stays in use; the first of a run is logged."},
		func() float64 { return float64(rs.FileErrors()) }))
	o := &opened{store: rs, label: "redis", close: func() { stop(); rs.Close() }, overrides: ov, slots: true, preflight: p,
		probe: func(ctx context.Context) (string, error) {
			// Every primary is asked: on Cluster, one slot's answer says
			// nothing of the others.
			up, total, err := rs.Reachable(ctx)
			line := fmt.Sprintf("%d of %d slots reachable", up, total)
			if err == nil && up < total {
				err = errors.New(line)
			}
			return line, err
		}}
	if r != nil && r.LocalSync != nil {
		ls, err := localsync.New(localsync.Options{
			Shared: rs, Interval: r.LocalSync.Interval, Instances: cfg.Store.Instances, Timeout: cfg.Store.Timeout,
			OnSync: func(took time.Duration, err error) {
				s.metrics.storeCall("sync", took, err)
				if err == nil {
					return
				}
				if ok, held := s.logs.Allow("local-sync"); ok { // every sync_interval while Redis is down
					s.log.Warn("local-sync: sync failed; kept for the next", "error", err, "suppressed", held)
				}
			},
		})
		if err != nil {
			o.close()
			return nil, err
		}
		o.store, o.label, o.slots = ls, "redis, local-sync", false
		o.close = func() { stop(); ls.Close(); rs.Close() }
	}
	return o, nil
}

func openPostgres(s *Server, cfg *config.Config, url string) (*opened, error) {
	var opts pgstore.Options
	if p := cfg.Store.Postgres; p != nil {
		opts.Schema, opts.Durable = p.Schema, p.Durable
		if url == "" {
			url = p.URL
		}
	}
	opts.Logger = s.log
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps, err := pgstore.Open(ctx, url, opts)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	var commit string
	if err := ps.Pool().QueryRow(ctx, "SHOW synchronous_commit").Scan(&commit); err == nil && commit == "off" {
		s.log.Warn("postgres: synchronous_commit is off: a crash of PostgreSQL may lose the last quota charges it acknowledged (docs/postgres.md, durability)")
	}
	s.metrics.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_postgres_sweep_errors_total",
		Help: "Rounds of the PostgreSQL store's background sweep (deleting the rows back to full) that failed."},
		func() float64 { return float64(ps.SweepErrors()) }))
	return &opened{store: ps, label: "postgres", close: ps.Close, overrides: overrides.New(),
		probe: func(ctx context.Context) (string, error) {
			v, err := ps.Version(ctx)
			line := fmt.Sprintf("schema %s at version %d of %d", ps.Schema(), v, pgstore.SchemaVersion)
			if err == nil && v != pgstore.SchemaVersion {
				err = errors.New(line)
			}
			return line, err
		}}, nil
}
