package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Schema is the PostgreSQL schema holding the store's tables and
	// functions. Default "sluice". Open also reads it from the URL's
	// sluice_schema parameter.
	Schema string
	// Durable keeps every limit's state in the logged table, as calendar
	// limits' always are: a crash of PostgreSQL then loses no rate
	// limit's state either, at the price of WAL for every check. Default
	// false: the states of the other algorithms live in an UNLOGGED
	// table, which a crash empties (every key back to full, as on a
	// Redis without persistence) and a clean restart keeps.
	Durable bool
	// SweepEvery is how often the background sweep deletes the rows back
	// to full from a slice of SweepBlocks blocks of each table, so that
	// the tables do not grow with every key ever seen. Default 1s;
	// negative: no sweep (run Sweep yourself).
	SweepEvery time.Duration
	// SweepBlocks bounds each sweep's work: blocks of 8 KiB scanned per
	// table. Default 1024.
	SweepBlocks int
	// MaxInFlight is how many calls of the take function run at once
	// before further calls queue and go together in the next one (each
	// still all-or-nothing on its own): concurrent checks of one key then
	// wait for its row lock once per batch, not once each. Default 2.
	MaxInFlight int
	// Logger hears of failed sweeps (the first of a run, and its end).
	// Default: none.
	Logger *slog.Logger
}

// Errors.
var (
	// ErrClosed is returned by the calls of a Store after its Close.
	ErrClosed = fmt.Errorf("pgstore: %w", sluice.ErrStoreClosed)
	// ErrOverloaded is returned at once, without calling PostgreSQL, when
	// maxQueue calls already wait for it.
	ErrOverloaded = errors.New("pgstore: too many calls waiting for PostgreSQL")
)

// Store is a sluice.Store on PostgreSQL, safe for concurrent use. A check
// is one call of a PL/pgSQL function (one round trip) that locks the
// rows of its keys, decides on the database's clock and writes the new
// states, so that it is exact under any number of callers and processes.
type Store struct {
	pool       *pgxpool.Pool
	owned      bool
	schema     string // sanitized identifier
	schemaName string
	takeSQL    string
	durable    bool
	closed     atomic.Bool

	batch batcher

	sweepEvery  time.Duration
	sweepBlocks int64
	log         *slog.Logger
	stop        chan struct{}
	stopped     sync.WaitGroup
	sweepErrs   atomic.Uint64
}

var _ sluice.Store = (*Store)(nil)

// New returns a Store on a pool the application already has; Close does
// not close it. It does not touch the database: run Migrate once before
// the first check (Open does), or `sluice store migrate`.
func New(pool *pgxpool.Pool, opts Options) *Store {
	s := &Store{pool: pool, durable: opts.Durable, log: opts.Logger, stop: make(chan struct{})}
	s.schemaName = opts.Schema
	if s.schemaName == "" {
		s.schemaName = "sluice"
	}
	s.schema = pgx.Identifier{s.schemaName}.Sanitize()
	s.takeSQL = "SELECT " + s.schema + ".take($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
	s.batch.maxInFlight = opts.MaxInFlight
	if s.batch.maxInFlight <= 0 {
		s.batch.maxInFlight = 2
	}
	s.sweepEvery, s.sweepBlocks = opts.SweepEvery, int64(opts.SweepBlocks)
	if s.sweepEvery == 0 {
		s.sweepEvery = time.Second
	}
	if s.sweepBlocks <= 0 {
		s.sweepBlocks = 1024
	}
	if s.sweepEvery > 0 {
		s.stopped.Add(1)
		go s.sweepLoop()
	}
	return s
}

// Open connects to the database at rawURL (a PostgreSQL URL or key=value
// string, as pgx reads it: sslmode, sslrootcert, sslcert, sslkey,
// passfile and the pool's pool_max_conns among its parameters) and
// applies the migrations the database lacks (Migrate). The URL's
// sluice_schema parameter sets Options.Schema where that is not set.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	cfg, err := ParseConfig(rawURL, &opts)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	s := New(pool, opts)
	s.owned = true
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// ParseConfig reads rawURL as Open does, moving its sluice_schema
// parameter into opts.Schema where that is empty.
func ParseConfig(rawURL string, opts *Options) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	rt := cfg.ConnConfig.RuntimeParams
	if v, ok := rt["sluice_schema"]; ok {
		if opts.Schema == "" {
			opts.Schema = v
		}
		delete(rt, "sluice_schema")
	}
	return cfg, nil
}

// Pool returns the store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the name of the store's schema.
func (s *Store) Schema() string { return s.schemaName }

// Close stops the sweep and, for a Store from Open, closes its pool;
// later calls fail with ErrClosed.
func (s *Store) Close() {
	if s.closed.Swap(true) {
		return
	}
	close(s.stop)
	s.stopped.Wait()
	if s.owned {
		s.pool.Close()
	}
}

// Take decides one request in one call of the take function.
func (s *Store) Take(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	var d [1]sluice.Decision
	err := s.TakeAll(ctx, []sluice.Request{req}, d[:])
	return d[0], err
}

// TakeAll decides reqs all-or-nothing in one call of the take function.
// Two requests with the same key, algorithm and period are refused with
// sluice.ErrDuplicateRequest. Concurrent calls are coalesced (see
// Options.MaxInFlight).
func (s *Store) TakeAll(ctx context.Context, reqs []sluice.Request, dst []sluice.Decision) error {
	if len(dst) < len(reqs) {
		return fmt.Errorf("pgstore: TakeAll: %d decisions for %d requests", len(dst), len(reqs))
	}
	if len(reqs) == 0 {
		return nil
	}
	if s.closed.Load() {
		return ErrClosed
	}
	if err := check(reqs); err != nil {
		return err
	}
	return s.coalesce(ctx, &call{reqs: reqs, dst: dst[:len(reqs)]})
}

// TakeTx decides reqs all-or-nothing inside the caller's transaction tx:
// what it takes is committed or rolled back with the caller's own work,
// and the rows of its keys stay locked until then (concurrent checks of
// those keys wait for tx to end: keep it short). Under REPEATABLE READ or
// SERIALIZABLE a concurrent check of the same key makes tx fail with a
// serialization error, which the caller retries as it retries any.
func (s *Store) TakeTx(ctx context.Context, tx pgx.Tx, reqs ...sluice.Request) ([]sluice.Decision, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if err := check(reqs); err != nil {
		return nil, err
	}
	c := &call{reqs: reqs, dst: make([]sluice.Decision, len(reqs))}
	s.run(ctx, tx, []*call{c})
	if c.err != nil {
		return nil, c.err
	}
	return c.dst, nil
}

// check validates a batch as every store does.
func check(reqs []sluice.Request) error {
	for i := range reqs {
		r := &reqs[i]
		if err := r.Validate(); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if !r.Refund.IsZero() && len(reqs) > 1 {
			return fmt.Errorf("%w: request %d", sluice.ErrRefundInBatch, i)
		}
		if !r.Now.Equal(reqs[0].Now) {
			return fmt.Errorf("pgstore: request %d: every request of a batch must have the same Now", i)
		}
		for j := range i {
			if reqs[j].Key == r.Key && reqs[j].Limit.SameState(r.Limit) {
				return fmt.Errorf("%w: requests %d and %d", sluice.ErrDuplicateRequest, j, i)
			}
		}
	}
	return nil
}

// Reset deletes the state of key under limit.
func (s *Store) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	if s.closed.Load() {
		return ErrClosed
	}
	_, err := s.pool.Exec(ctx, "SELECT "+s.schema+".forget($1, $2)", []byte(key), kind(limit))
	if err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	return nil
}

// kind names a limit's state beside its key: algorithm, period (µs) and
// zone, as sluice.Limit.SameState tells states apart.
func kind(l sluice.Limit) string {
	k := l.Algorithm.Resolved().String() + ":" + strconv.FormatInt(int64(l.Period/time.Microsecond), 10)
	if l.Zone != nil {
		k += ":" + l.Zone.String()
	}
	return k
}

// args are the take function's arguments for a batch of calls.
type args struct {
	keys    [][]byte
	kinds   []string
	durable []bool
	lims    []int64
	costs   []int64
	forced  []bool
	refunds []*int64
	groups  []int32
	nows    []*int64
	ids     [][]byte
}

// add appends c's requests as one group.
func (s *Store) add(a *args, c *call) {
	r0 := &c.reqs[0]
	var now *int64
	t := time.Now().UnixMicro() // a calendar's windows are sent around it
	if !r0.Now.IsZero() {
		t = r0.Now.UnixMicro()
		now = &t
	}
	a.groups = append(a.groups, int32(len(c.reqs)))
	a.nows = append(a.nows, now)
	if r0.ID != "" {
		a.ids = append(a.ids, []byte(r0.ID))
	} else {
		a.ids = append(a.ids, nil)
	}
	for i := range c.reqs {
		r := &c.reqs[i]
		l := r.Limit
		a.keys = append(a.keys, []byte(r.Key))
		a.kinds = append(a.kinds, kind(l))
		a.durable = append(a.durable, s.durable || l.Algorithm == sluice.Calendar)
		p := algorithm.ParamsOf(l)
		a.lims = append(a.lims, int64(l.Algorithm.Resolved()), p.Rate, p.Period, p.Burst)
		if l.Algorithm == sluice.Calendar {
			b2, b3 := p.Window(t)
			b1, _ := p.Window(b2 - 1)
			_, b4 := p.Window(b3)
			a.lims = append(a.lims, b1, b2, b3, b4)
		} else {
			a.lims = append(a.lims, 0, 0, 0, 0)
		}
		a.costs = append(a.costs, r.Cost)
		a.forced = append(a.forced, r.Forced())
		if r.Refund.IsZero() {
			a.refunds = append(a.refunds, nil)
		} else {
			taken := r.Refund.UnixMicro()
			a.refunds = append(a.refunds, &taken)
		}
	}
}

// run decides calls in one call of the take function on q (the pool, or
// a caller's transaction), setting each call's decisions or error.
func (s *Store) run(ctx context.Context, q querier, calls []*call) {
	var a args
	for _, c := range calls {
		s.add(&a, c)
	}
	var res []int64
	err := q.QueryRow(ctx, s.takeSQL, a.keys, a.kinds, a.durable, a.lims, a.costs, a.forced, a.refunds, a.groups, a.nows, a.ids).Scan(&res)
	if err == nil && len(res) != 5*len(a.keys) {
		err = fmt.Errorf("take returned %d numbers for %d requests", len(res), len(a.keys))
	}
	if err != nil {
		err = fmt.Errorf("pgstore: %w", err)
	}
	i := 0
	for _, c := range calls {
		c.err = err
		for j := range c.reqs {
			if err == nil {
				v := res[5*i : 5*i+5]
				c.dst[j] = sluice.Decision{
					Allowed:    v[0] == 1,
					Limit:      c.reqs[j].Limit,
					Remaining:  v[1],
					RetryAfter: time.Duration(v[2]) * time.Microsecond,
					ResetAfter: time.Duration(v[3]) * time.Microsecond,
					Delay:      time.Duration(v[4]) * time.Microsecond,
				}
			}
			i++
		}
	}
}
