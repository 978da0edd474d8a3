package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
)

// Results of a Check.
const (
	// ResultOK: as sluice needs it.
	ResultOK = "ok"
	// ResultWarn: sluice works, but a limit can admit more than it
	// allows (an evicting policy), or a feature is off on this instance
	// (a refused channel).
	ResultWarn = "warn"
	// ResultFail: sluice cannot decide on this server as this user.
	ResultFail = "fail"
	// ResultUnknown: the server would not say (a command refused to this
	// user, or one it does not have).
	ResultUnknown = "unknown"
)

// Report is what a preflight found.
type Report struct {
	Server string  // "redis 7.0.15", "valkey 8.0.1"; "" when INFO was refused
	User   string  // ACL WHOAMI; "" when refused
	Checks []Check // in a fixed order: decide, eviction, persistence, commands
}

// Check is one thing a preflight looked at.
type Check struct {
	Name   string // "decide", "eviction", "persistence" or "commands"
	Result string // ResultOK, ResultWarn, ResultFail or ResultUnknown
	Detail string // what was found
	Fix    string // what to change, when the result is warn or fail
}

// Check returns the check named name, if the report has it.
func (r Report) Check(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// Command is a command that a caller of the store sends on its client
// (sluice serve's runtime overrides), for the preflight to dry-run as the
// store's user: For says what needs it.
type Command struct {
	Args []string
	For  string
}

// Preflight asks Redis whether it is set up as sluice needs, as this
// store's user, and returns what it found:
//
//   - decide: a peek (cost 0, nothing written) on a key under the prefix,
//     by FCALL or by EVALSHA as calls go: fail when neither is permitted.
//   - eviction: maxmemory-policy and maxmemory, on every node: warn for
//     any policy but noeviction once maxmemory is set, because an evicted
//     key is a limit reset (every key sluice writes carries a TTL, so the
//     volatile-* policies take them too).
//   - persistence: AOF and RDB snapshots; without either, a restart of
//     Redis resets every limit (ok, said).
//   - commands: ACL DRYRUN, where the server has it and the user may run
//     it, of every command the store sends and of also.
//
// It returns an error only when it could ask nothing (not connected, or
// Redis does not answer).
func (s *Store) Preflight(ctx context.Context, also ...Command) (Report, error) {
	client, cluster, err := s.conn()
	if err != nil {
		return Report{}, err
	}
	var r Report
	info, err := client.Do(ctx, client.B().Info().Section("server").Build()).ToString()
	if err == nil {
		r.Server = serverName(info)
	} else if !isRedisErr(err) {
		return Report{}, fmt.Errorf("redisstore: preflight: %w", err)
	}
	if u, err := client.Do(ctx, client.B().AclWhoami().Build()).ToString(); err == nil {
		r.User = u
	}
	r.Checks = append(r.Checks, s.checkDecide(ctx), checkEviction(ctx, client), checkPersistence(ctx, client), s.checkCommands(ctx, client, cluster, r.User, also))
	return r, nil
}

func isRedisErr(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re)
}

// serverName reads "valkey 8.0.1" or "redis 7.0.15" from INFO server.
func serverName(info string) string {
	f := infoFields(info)
	if v := f["valkey_version"]; v != "" {
		return "valkey " + v
	}
	name := f["server_name"]
	if name == "" {
		name = "redis"
	}
	return name + " " + f["redis_version"]
}

func infoFields(info string) map[string]string {
	f := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			f[k] = v
		}
	}
	return f
}

func (s *Store) checkDecide(ctx context.Context) Check {
	c := Check{Name: "decide"}
	_, err := s.Take(ctx, sluice.Request{Key: "sluice-preflight", Limit: sluice.PerSecond(1), Cost: 0})
	switch {
	case err == nil && s.fn.usable():
		c.Result, c.Detail = ResultOK, "by FCALL (Redis Functions)"
	case err == nil:
		c.Result, c.Detail = ResultOK, "by EVALSHA (scripts: Redis Functions refused to this user or missing)"
	case hasPrefix(err, "NOPERM") || strings.Contains(err.Error(), "can't run this command"): // the second: a command the script calls, refused
		c.Result, c.Detail = ResultFail, err.Error()
		c.Fix = fmt.Sprintf("grant the user +fcall +function|load (or +evalsha +eval +script|load), +time and the keys ~%s*: see docs/operations.md, Redis requirements", s.prefix)
	default:
		c.Result, c.Detail = ResultUnknown, err.Error()
	}
	return c
}

func checkEviction(ctx context.Context, client rueidis.Client) Check {
	c := Check{Name: "eviction", Result: ResultOK}
	nodes := map[string]rueidis.Client{"": client}
	if client.Mode() == rueidis.ClientModeCluster {
		nodes = client.Nodes()
	}
	for _, n := range nodes {
		info, err := n.Do(ctx, n.B().Info().Section("memory").Build()).ToString()
		if err != nil {
			return Check{Name: "eviction", Result: ResultUnknown, Detail: "INFO memory: " + err.Error()}
		}
		f := infoFields(info)
		policy, maxmemory := f["maxmemory_policy"], f["maxmemory"]
		c.Detail = fmt.Sprintf("maxmemory-policy %s, maxmemory %s", policy, maxmemory)
		if policy != "noeviction" && maxmemory != "0" {
			c.Result = ResultWarn
			c.Fix = "CONFIG SET maxmemory-policy noeviction (and in redis.conf), or a Redis of sluice's own: an evicted key is a limit reset, and every sluice key has a TTL, so volatile-* policies take them too"
			return c
		}
	}
	return c
}

func checkPersistence(ctx context.Context, client rueidis.Client) Check {
	c := Check{Name: "persistence", Result: ResultOK}
	info, err := client.Do(ctx, client.B().Info().Section("persistence").Build()).ToString()
	if err != nil {
		return Check{Name: "persistence", Result: ResultUnknown, Detail: "INFO persistence: " + err.Error()}
	}
	aof := infoFields(info)["aof_enabled"] == "1"
	save := "unknown"
	if kv, err := client.Do(ctx, client.B().ConfigGet().Parameter("save").Build()).AsStrMap(); err == nil {
		save = kv["save"]
	}
	switch {
	case aof:
		c.Detail = "AOF on: counts survive a restart of Redis"
	case save != "" && save != "unknown":
		c.Detail = "RDB snapshots (save " + save + "): a restart of Redis forgets the counts since the last snapshot"
	case save == "":
		c.Detail = "none: a restart of Redis resets every limit"
	default:
		c.Detail = "AOF off; RDB snapshots unknown (CONFIG GET refused)"
	}
	return c
}

// storeCommands are the commands the store sends, as ACL DRYRUN takes
// them, with what each is for; key stands for a key under the prefix.
func (s *Store) storeCommands(cluster bool) []Command {
	key := s.prefix + "{preflight}:x"
	cmds := []Command{
		{[]string{"FCALL", libName, "1", key}, "deciding (Redis Functions)"},
		{[]string{"FUNCTION", "LOAD", "x"}, "loading sluice's library"},
		{[]string{"EVALSHA", strings.Repeat("0", 40), "1", key}, "deciding (scripts)"},
		{[]string{"EVAL", "return 1", "1", key}, "deciding (scripts)"},
		{[]string{"TIME"}, "deciding on Redis's clock"},
		{[]string{"DEL", key}, "Reset"},
		{[]string{"ZREM", key, "x"}, "concurrency limits"},
	}
	if cluster {
		cmds = append(cmds, Command{[]string{"CLUSTER", "SLOTS"}, "readiness on Cluster"})
	}
	return cmds
}

func (s *Store) checkCommands(ctx context.Context, client rueidis.Client, cluster bool, user string, also []Command) Check {
	c := Check{Name: "commands"}
	if user == "" {
		c.Result, c.Detail = ResultUnknown, "not checked: ACL WHOAMI refused or missing (Redis before 6)"
		return c
	}
	var refused []string
	own := s.storeCommands(cluster)
	scripts := 0   // of the store's FCALL and EVALSHA, the ones refused
	clock := false // TIME refused: every decision reads Redis's clock
	for i, cmd := range append(own, also...) {
		args := append([]string{"ACL", "DRYRUN", user}, cmd.Args...)
		res, err := client.Do(ctx, client.B().Arbitrary(args[0], args[1]).Args(args[2:]...).Build()).ToString()
		if err != nil {
			c.Result, c.Detail = ResultUnknown, "not checked: ACL DRYRUN: "+err.Error()
			return c
		}
		if res == "OK" {
			continue
		}
		name := cmd.Args[0]
		switch name {
		case "FCALL", "EVALSHA":
			if i < len(own) {
				scripts++
			}
		case "TIME":
			clock = i < len(own)
		case "FUNCTION", "CLUSTER", "SUBSCRIBE", "PUBLISH":
			name += " " + cmd.Args[1]
		}
		if i < len(own) && (name == "FUNCTION LOAD" || name == "EVAL" || name == "FCALL") {
			continue // optional while the other way is permitted: said by decide
		}
		refused = append(refused, fmt.Sprintf("%s (%s): %s", name, cmd.For, res))
	}
	switch {
	case scripts == 2:
		c.Result, c.Detail = ResultFail, "neither FCALL nor EVALSHA is permitted to "+user
		c.Fix = fmt.Sprintf("ACL SETUSER %s +fcall +function|load +evalsha +eval +script|load ~%s*", user, s.prefix)
	case clock:
		c.Result, c.Detail = ResultFail, "TIME is refused to "+user+": every decision reads Redis's clock"
		c.Fix = fmt.Sprintf("ACL SETUSER %s +time", user)
	case len(refused) > 0:
		c.Result, c.Detail = ResultWarn, "refused to "+user+": "+strings.Join(refused, "; ")
		c.Fix = "grant what docs/operations.md, Redis requirements, lists"
	default:
		c.Result, c.Detail = ResultOK, "every command permitted to "+user
	}
	return c
}

// watchDials calls f, from a goroutine of its own, after each new
// connection of the store's client, at most once a second.
func (s *Store) watchDials(f func()) {
	if f == nil {
		return
	}
	dialed := make(chan struct{}, 1)
	s.stop = make(chan struct{})
	dial := s.opt.DialCtxFn
	s.opt.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		conn, err := dialVia(ctx, dial, dst, d, cfg)
		if err == nil {
			select {
			case dialed <- struct{}{}:
			default:
			}
		}
		return conn, err
	}
	stop := s.stop
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-dialed:
			}
			f()
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
}

// String is the check in one line: name, result, detail.
func (c Check) String() string {
	return c.Name + ": " + c.Result + ": " + c.Detail
}
