package redisstore

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

//go:embed scripts/*.lua
var scripts embed.FS

// scriptOrder lists the parts of the Lua code, helpers first, the entry
// point (take_all, in take.lua) last.
var scriptOrder = []string{
	"prelude", "arith", "fixed_window", "sliding_window", "token_bucket",
	"gcra", "leaky_bucket", "calendar", "sliding_log", "take",
}

// parts returns the Lua parts joined.
func parts() string {
	var b strings.Builder
	for _, name := range scriptOrder {
		b.WriteString(mustScript(name))
		b.WriteByte('\n')
	}
	return b.String()
}

// The same Lua code runs two ways. As a Redis Function (Redis 7+), the
// default: the library is loaded once per server, so a call runs only the
// decision, not the definitions of every helper (which cost a lone call
// about a third of its time in Redis), and the helpers' caches live from
// one call to the next. As a script by EVALSHA, where functions are not
// available (Redis 6, or a user whose ACL forbids FUNCTION LOAD).
//
// The library's name carries a hash of its code, so that two versions of
// sluice sharing a server never run each other's code.
var (
	code         = parts()
	libName      = "sluice_" + shortHash(code)
	scriptSource = code + "bind()\nreturn take_all(KEYS, ARGV)\n"
	libSource    = "#!lua name=" + libName + "\n" + code + `local bound = false
redis.register_function('` + libName + `', function(keys, argv)
  if not bound then
    bind()
    bound = true
  end
  return take_all(keys, argv)
end)
`
	takeScript = rueidis.NewLuaScript(scriptSource)
)

func shortHash(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// Script returns the Lua source of the script calls run by EVALSHA where
// Redis Functions are not available, for operators who preload scripts and
// for benchmarks that drive it directly. Its arguments are documented at
// the top of scripts/take.lua.
func Script() string { return scriptSource }

// Library returns the Redis Functions library calls run by FCALL, and the
// name of its one function (which takes the script's keys and arguments).
func Library() (source, function string) { return libSource, libName }

// functions tracks whether calls go by FCALL.
type functions struct {
	off    atomic.Int64 // Unix ns until which calls go by EVALSHA; math.MaxInt64: for good
	loadMu sync.Mutex
	loaded atomic.Int64 // Unix ns of the last successful load
}

// retryLoad is how long calls go by EVALSHA after a load failed for a
// reason that may pass.
const retryLoad = 10 * time.Second

func (f *functions) usable() bool {
	off := f.off.Load()
	return off == 0 || off != math.MaxInt64 && time.Now().UnixNano() > off
}

// load loads the library on every node of client, once for all the
// callers that found it missing at the same time, and reports whether it
// is loaded. A server that refuses it for good (no FUNCTION command, or an
// ACL that forbids it) turns functions off; any other failure, for
// retryLoad.
func (f *functions) load(ctx context.Context, client rueidis.Client) bool {
	asked := time.Now().UnixNano()
	f.loadMu.Lock()
	defer f.loadMu.Unlock()
	if f.loaded.Load() >= asked {
		return true // loaded by another caller meanwhile
	}
	nodes := map[string]rueidis.Client{"": client}
	if client.Mode() == rueidis.ClientModeCluster {
		nodes = client.Nodes()
	}
	var ok int
	var lastErr error
	for _, n := range nodes {
		err := n.Do(ctx, n.B().FunctionLoad().Replace().FunctionCode(libSource).Build()).Error()
		switch {
		case err == nil:
			ok++
		case hasPrefix(err, "READONLY"):
			// A replica: its primary's copy reaches it.
		default:
			lastErr = err
		}
	}
	if ok > 0 && lastErr == nil {
		f.loaded.Store(time.Now().UnixNano())
		return true
	}
	switch {
	case hasPrefix(lastErr, "NOPERM"), hasPrefix(lastErr, "unknown command"):
		f.off.Store(math.MaxInt64)
	default:
		f.off.Store(time.Now().Add(retryLoad).UnixNano())
	}
	return false
}

// exec runs the decision function on keys and args: by FCALL, loading the
// library where it is missing (a new server, a restart, a failover, a
// FUNCTION FLUSH), or by EVALSHA where functions are off. A call that
// found the function missing was not run, so running it again is safe.
// FCALL goes by via, the shared connection (client) or the store's own;
// loading the library and EVALSHA go by client.
func (s *Store) exec(ctx context.Context, client rueidis.Client, via rueidis.CommandClient, keys, args []string) ([]rueidis.RedisMessage, error) {
	if s.fn.usable() {
		vals, err := fcall(ctx, via, keys, args)
		switch {
		case hasPrefix(err, "Function not found"):
			if s.fn.load(ctx, client) {
				vals, err = fcall(ctx, via, keys, args)
				if !hasPrefix(err, "Function not found") {
					return vals, err
				}
			}
		case hasPrefix(err, "unknown command"), hasPrefix(err, "NOPERM") && strings.Contains(err.Error(), "'fcall'"):
			// Redis 6, a renamed command, or an ACL without FCALL (not one
			// that forbids a key: the script is refused it too).
			s.fn.off.Store(math.MaxInt64)
		default:
			return vals, err
		}
	}
	return takeScript.Exec(ctx, client, keys, args).ToArray()
}

func fcall(ctx context.Context, client rueidis.CommandClient, keys, args []string) ([]rueidis.RedisMessage, error) {
	cmd := client.B().Fcall().Function(libName).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return client.Do(ctx, cmd).ToArray()
}

// hasPrefix reports whether err is a Redis error reply starting with
// prefix, after the generic "ERR " that some clients keep and some drop.
func hasPrefix(err error, prefix string) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.HasPrefix(strings.TrimPrefix(re.Error(), "ERR "), prefix)
}
