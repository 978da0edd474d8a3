// Package overrides keeps the per-key limits set at runtime through the
// admin API, on top of a policy file's own overrides and plans.
//
// On the memory store they live in the process. On Redis they live in
// Redis, so that every instance agrees: a hash of every override and its
// version, changed by one script that also publishes the new version.
// Each instance loads the hash when it starts, reloads it on every
// message and every few seconds (a message missed while disconnected is
// caught up), and acknowledges the version it applied; a change returns
// once every subscribed instance has applied it, so the next check on any
// of them sees it.
package overrides

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/redisstore"
)

// Entry is one override: the limits of a policy's key.
type Entry struct {
	Policy string   `json:"policy"`
	Key    string   `json:"key"`
	Limits []string `json:"limits"`
}

// Applied says how far a change reached: the version it made, and how
// many of the instances subscribed when it was made have applied it.
type Applied struct {
	Version   int64 `json:"version"`
	Instances int64 `json:"instances"`
	AppliedBy int64 `json:"applied_by"`
}

// ErrInvalid is wrapped by Set's errors about its input.
var ErrInvalid = errors.New("invalid override")

// Registry holds the runtime overrides. It is safe for concurrent use.
type Registry struct {
	table atomic.Pointer[map[string][]sluice.Limit] // policy \x00 key → limits
	mu    sync.Mutex                                // serialises changes in the process
	redis *shared                                   // nil: this process only
	log   *slog.Logger

	// What went wrong following Redis (Errors).
	reloadErrs, subscribeErrs, unparsed atomic.Uint64
}

// New returns a Registry of this process alone.
func New() *Registry {
	r := &Registry{log: slog.New(slog.DiscardHandler)}
	r.table.Store(&map[string][]sluice.Limit{})
	return r
}

// Lookup returns the limits set for storeKey (policy \x00 key), if any.
func (r *Registry) Lookup(storeKey string) ([]sluice.Limit, bool) {
	t := *r.table.Load()
	if len(t) == 0 {
		return nil, false
	}
	ls, ok := t[storeKey]
	return ls, ok
}

// Errors counts what went wrong following the overrides in Redis, each
// also logged, sampled.
type Errors struct {
	Reload    uint64 // reading them failed: the last ones read stay in force
	Subscribe uint64 // the subscription to their changes was lost or refused: they arrive at the next reload, every 5s
	Unparsed  uint64 // one did not parse, and was skipped
}

// Errors returns what went wrong following Redis since the registry started.
func (r *Registry) Errors() Errors {
	return Errors{Reload: r.reloadErrs.Load(), Subscribe: r.subscribeErrs.Load(), Unparsed: r.unparsed.Load()}
}

// LimitsFor returns the limits of key under p, for a request that names
// plan: its override set at runtime, else p's own choice (an override of
// the policy file, the plan, the policy's limits). The store key is made
// only when there are runtime overrides. A nil Registry has none.
func (r *Registry) LimitsFor(p *config.Policy, key, plan string) []sluice.Limit {
	if r != nil {
		if t := *r.table.Load(); len(t) > 0 {
			if ls, ok := t[p.Name+"\x00"+key]; ok {
				return ls
			}
		}
	}
	return p.LimitsFor(key, plan)
}

// List returns every override, sorted by policy and key.
func (r *Registry) List() []Entry {
	out := []Entry{} // an empty list, not null, in JSON
	for k, ls := range *r.table.Load() {
		policy, key, _ := strings.Cut(k, "\x00")
		e := Entry{Policy: policy, Key: key}
		for _, l := range ls {
			e.Limits = append(e.Limits, l.String())
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(strings.Compare(a.Policy, b.Policy), strings.Compare(a.Key, b.Key))
	})
	return out
}

// Set gives policy's key limits of its own, or removes its override when
// limits is empty. The limits must be valid; the caller checks the policy.
func (r *Registry) Set(ctx context.Context, policy, key string, limits []sluice.Limit) (Applied, error) {
	if key == "" || len(key) > sluice.MaxIdentityLen {
		return Applied{}, fmt.Errorf("%w: key of %d bytes: want 1 to %d", ErrInvalid, len(key), sluice.MaxIdentityLen)
	}
	for i, l := range limits {
		if err := l.Validate(); err != nil {
			return Applied{}, fmt.Errorf("%w: limits[%d]: %w", ErrInvalid, i, err)
		}
		for j := range i {
			if limits[j].SameState(l) {
				return Applied{}, fmt.Errorf("%w: limits[%d] and limits[%d] share one state (algorithm, period and zone): give one of them", ErrInvalid, j, i)
			}
		}
	}
	k := policy + "\x00" + key
	if r.redis != nil {
		return r.redis.set(ctx, r, k, encode(limits))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := maps.Clone(*r.table.Load())
	if len(limits) == 0 {
		delete(t, k)
	} else {
		t[k] = slices.Clone(limits)
	}
	r.table.Store(&t)
	return Applied{Instances: 1, AppliedBy: 1}, nil
}

// encode writes limits as stored in Redis: their strings, joined by ";".
func encode(limits []sluice.Limit) string {
	s := make([]string, len(limits))
	for i, l := range limits {
		s[i] = l.String()
	}
	return strings.Join(s, ";")
}

// decode reads what encode wrote.
func decode(v string) ([]sluice.Limit, error) {
	var ls []sluice.Limit
	for _, part := range strings.Split(v, ";") {
		l, err := sluice.ParseLimit(part)
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// shared is the Redis side of a Registry.
type shared struct {
	conn    func() (rueidis.Client, error) // the store's client, once connected
	hash    string                         // every override, and versionField
	acks    string                         // instance → the version it applied
	channel string
	id      string
	applied atomic.Int64 // the version this instance applied
}

const (
	versionField = "\x00version"
	// reloadEvery bounds how stale an instance that missed a message is.
	reloadEvery = 5 * time.Second
	// waitApplied bounds how long a change waits for the instances'
	// acknowledgements.
	waitApplied = 2 * time.Second
)

var setScript = rueidis.NewLuaScript(`
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
local v = redis.call('HINCRBY', KEYS[1], ARGV[4], 1)
-- A user refused the channel still changes the overrides: the other
-- instances see the change at their next reload.
local n = redis.pcall(ARGV[3], KEYS[2], v)
if type(n) ~= 'number' then
  n = 0
end
return {v, n}
`)

// NewShared returns a Registry kept in Redis, under prefix, through the
// client conn returns once it is connected, and follows it until ctx is
// done. It waits up to two seconds for the overrides to be loaded; while
// Redis cannot be reached, it holds none and catches up once it can.
func NewShared(ctx context.Context, conn func() (rueidis.Client, error), prefix string, log *slog.Logger) *Registry {
	r := New()
	if log != nil {
		r.log = log
	}
	tag := prefix + "{overrides}"
	r.redis = &shared{conn: conn, hash: tag, acks: tag + ":acks", channel: tag + ":changes", id: strconv.FormatUint(rand.Uint64(), 36)}
	subscribed := make(chan struct{})
	go r.follow(ctx, subscribed)
	if _, err := conn(); err != nil {
		return r // Redis is not there: no wait, the follower catches up
	}
	select {
	case <-subscribed:
		r.reload(ctx)
	case <-time.After(waitApplied):
	}
	return r
}

// follow subscribes to the changes and reloads on each, and every
// reloadEvery, until ctx is done. The subscription's callbacks run on the
// client's reading goroutine, which must not wait for Redis: they only
// wake the goroutine that reloads.
func (r *Registry) follow(ctx context.Context, subscribed chan struct{}) {
	sh := r.redis
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default: // a reload is due already
		}
	}
	go func() {
		var reloads lineEvery // one line, then at most one a minute
		t := time.NewTicker(reloadEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-wake:
			}
			if err := r.reload(ctx); err != nil && ctx.Err() == nil {
				r.reloadErrs.Add(1)
				if held, ok := reloads.allow(time.Minute); ok {
					r.log.Warn("overrides: reload from Redis failed; the overrides read last stay in force", "error", err, "lines_held_back", held)
				}
			}
		}
	}()
	var once sync.Once
	settle := func() { once.Do(func() { close(subscribed) }) }
	var log lineEvery
	backoff := retryFirst
	for ctx.Err() == nil {
		client, err := sh.conn()
		if err != nil {
			sleep(ctx, retryFirst)
			continue
		}
		sub := client.B().Subscribe().Channel(sh.channel).Build()
		if client.Mode() == rueidis.ClientModeCluster {
			sub = client.B().Ssubscribe().Channel(sh.channel).Build()
		}
		var got atomic.Bool
		err = client.Receive(rueidis.WithOnSubscriptionHook(ctx, func(rueidis.PubSubSubscription) {
			got.Store(true)
			poke() // catch up with what changed while unsubscribed
			settle()
		}), sub, func(rueidis.PubSubMessage) { poke() })
		if ctx.Err() != nil {
			return
		}
		settle() // NewShared waits no longer
		r.subscribeErrs.Add(1)
		if got.Load() {
			backoff = retryFirst
		}
		// One line, then at most one a minute saying how many were held
		// back: a user refused the channel is refused at every retry.
		if held, ok := log.allow(time.Minute); ok {
			if noperm := strings.HasPrefix(strings.TrimPrefix(err.Error(), "ERR "), "NOPERM"); noperm {
				r.log.Warn("overrides: this Redis user may not subscribe to sluice's channel: overrides set on other instances reach this one at its next reload (every 5s), not at once; retrying with backoff",
					"channel", sh.channel, "fix", "ACL SETUSER <user> &"+sh.channel+" (see docs/operations.md, Redis requirements)", "error", err, "lines_held_back", held)
			} else {
				r.log.Warn("overrides: subscription to Redis lost; resubscribing", "error", err, "lines_held_back", held)
			}
		}
		sleep(ctx, backoff)
		backoff = min(2*backoff, retryMax)
	}
}

// The subscription is retried after retryFirst, doubling to retryMax.
const (
	retryFirst = 200 * time.Millisecond
	retryMax   = time.Minute
)

// lineEvery lets one log line through per interval, counting the rest.
type lineEvery struct {
	last time.Time
	held int
}

func (l *lineEvery) allow(interval time.Duration) (held int, ok bool) {
	if !l.last.IsZero() && time.Since(l.last) < interval {
		l.held++
		return 0, false
	}
	held, l.held, l.last = l.held, 0, time.Now()
	return held, true
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// RedisCommands are the commands a shared Registry sends under prefix,
// for a preflight to dry-run: reading and changing the overrides, and
// following their channel.
func RedisCommands(prefix string) []redisstore.Command {
	tag := prefix + "{overrides}"
	const what = "runtime overrides"
	return []redisstore.Command{
		{Args: []string{"HGETALL", tag}, For: what},
		{Args: []string{"HSET", tag + ":acks", "x", "1"}, For: what},
		{Args: []string{"EVALSHA", strings.Repeat("0", 40), "2", tag, tag + ":changes"}, For: what},
		{Args: []string{"SUBSCRIBE", tag + ":changes"}, For: what},
		{Args: []string{"PUBLISH", tag + ":changes", "1"}, For: what},
	}
}

// reload reads every override from Redis, swaps them in, and
// acknowledges the version.
func (r *Registry) reload(ctx context.Context) error {
	sh := r.redis
	client, err := sh.conn()
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	all, err := client.Do(ctx, client.B().Hgetall().Key(sh.hash).Build()).AsStrMap()
	if err != nil {
		return err
	}
	version, _ := strconv.ParseInt(all[versionField], 10, 64)
	if version != 0 && version <= sh.applied.Load() {
		return sh.ack(ctx, client, version) // nothing new
	}
	t := make(map[string][]sluice.Limit, len(all))
	for k, v := range all {
		if k == versionField {
			continue
		}
		ls, err := decode(v)
		if err != nil {
			r.unparsed.Add(1)
			r.log.Warn("overrides: an override in Redis does not parse; skipped", "key", k, "value", v, "error", err)
			continue
		}
		t[k] = ls
	}
	r.table.Store(&t)
	sh.applied.Store(version)
	return sh.ack(ctx, client, version)
}

// ack records that this instance applied version.
func (sh *shared) ack(ctx context.Context, client rueidis.Client, version int64) error {
	cmds := rueidis.Commands{
		client.B().Hset().Key(sh.acks).FieldValue().FieldValue(sh.id, strconv.FormatInt(version, 10)).Build(),
		client.B().Pexpire().Key(sh.acks).Milliseconds(int64(24 * time.Hour / time.Millisecond)).Build(),
	}
	for _, res := range client.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			return err
		}
	}
	return nil
}

// set writes one override (an empty value removes it), publishes the new
// version, applies it here and waits for the other instances to.
func (sh *shared) set(ctx context.Context, r *Registry, field, value string) (Applied, error) {
	client, err := sh.conn()
	if err != nil {
		return Applied{}, fmt.Errorf("overrides: %w", err)
	}
	publish := "PUBLISH"
	if client.Mode() == rueidis.ClientModeCluster {
		publish = "SPUBLISH"
	}
	vals, err := setScript.Exec(ctx, client, []string{sh.hash, sh.channel}, []string{field, value, publish, versionField}).AsIntSlice()
	if err != nil {
		return Applied{}, fmt.Errorf("overrides: %w", err)
	}
	if len(vals) != 2 {
		return Applied{}, errors.New("overrides: unexpected reply from Redis")
	}
	a := Applied{Version: vals[0], Instances: vals[1]}
	if err := r.reload(ctx); err != nil {
		return a, fmt.Errorf("overrides: %w", err)
	}
	deadline := time.Now().Add(waitApplied)
	for {
		acks, err := client.Do(ctx, client.B().Hvals().Key(sh.acks).Build()).AsStrSlice()
		if err != nil {
			return a, fmt.Errorf("overrides: %w", err)
		}
		a.AppliedBy = 0
		for _, v := range acks {
			if n, _ := strconv.ParseInt(v, 10, 64); n >= a.Version {
				a.AppliedBy++
			}
		}
		if a.AppliedBy >= a.Instances || time.Now().After(deadline) {
			return a, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}
