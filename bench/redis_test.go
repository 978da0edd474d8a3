package bench

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// drive runs op b.N times from callers goroutines over 10k keys and reports
// checks/s and the p50 and p99 latency of one call.
func drive(b *testing.B, callers int, op func(key string) error) {
	b.ResetTimer()
	el, all, err := load(callers, b.N, op)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "checks/s")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
	b.ReportMetric(0, "ns/op") // wall time per op is meaningless across callers
}

// load runs op n times from callers goroutines over 10k keys and returns
// the time taken and every call's latency, sorted.
func load(callers, n int, op func(key string) error) (time.Duration, []time.Duration, error) {
	ks := keySets()[1].keys
	var next atomic.Int64
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for c := range callers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t0 := time.Now()
				if err := op(ks[int(i)%len(ks)]); err != nil {
					failed.Store(err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		return el, nil, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	return el, all, nil
}

// rueidisClient returns a client of the Redis at addr, closed when b ends.
func rueidisClient(b *testing.B, addr string) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

// resetStats resets Redis's command statistics.
func resetStats(b *testing.B, rc rueidis.Client) {
	if err := rc.Do(context.Background(), rc.B().ConfigResetstat().Build()).Error(); err != nil {
		b.Fatal(err)
	}
}

// redisInfo returns the fields of one INFO section.
func redisInfo(b *testing.B, rc rueidis.Client, section string) map[string]string {
	text, err := rc.Do(context.Background(), rc.B().Info().Section(section).Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

// scriptUsec returns the µs Redis spent in scripts and functions (EVALSHA,
// EVAL and FCALL, their inner commands included) since its statistics
// were reset.
func scriptUsec(b *testing.B, rc rueidis.Client) float64 {
	var usec float64
	for cmd, stats := range redisInfo(b, rc, "commandstats") {
		if cmd != "cmdstat_evalsha" && cmd != "cmdstat_eval" && cmd != "cmdstat_fcall" {
			continue
		}
		for _, f := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				usec += n
			}
		}
	}
	return usec
}

// scriptTime resets Redis's command statistics and returns a function
// that reports the time Redis spent in scripts and functions per decision,
// the server's cost of one decision; and the CPU Redis used in all
// (reading, parsing and replying included) per decision and in cores: how
// close its one thread came to being the bottleneck.
func scriptTime(b *testing.B, rc rueidis.Client) func() {
	resetStats(b, rc)
	cpu := func() float64 {
		f := redisInfo(b, rc, "cpu")
		user, _ := strconv.ParseFloat(f["used_cpu_user_main_thread"], 64)
		sys, _ := strconv.ParseFloat(f["used_cpu_sys_main_thread"], 64)
		return user + sys
	}
	cpu0, t0 := cpu(), time.Now()
	return func() {
		cpuUsed, wall := cpu()-cpu0, time.Since(t0).Seconds()
		b.ReportMetric(scriptUsec(b, rc)/float64(b.N), "redis-µs/decision")
		b.ReportMetric(cpuUsed*1e6/float64(b.N), "redis-cpu-µs/decision")
		b.ReportMetric(cpuUsed/wall, "redis-cores")
	}
}

// gcraChecks returns one check of a key each by sluice's GCRA through rc
// (its keys under prefix) and by go-redis/redis_rate's GCRA through gr,
// on the same limit, an error when one denies.
func gcraChecks(rc rueidis.Client, gr *goredis.Client, prefix string) (sluiceGCRA, redisRate func(key string) error) {
	store := redisstore.New(rc, redisstore.Options{Prefix: prefix})
	rl := redis_rate.NewLimiter(gr)
	ctx := context.Background()
	limit := benchLimit
	limit.Algorithm = sluice.GCRA
	rrLimit := redis_rate.Limit{Rate: 1000, Burst: 100_000_000, Period: time.Hour}
	sluiceGCRA = func(key string) error {
		d, err := store.Take(ctx, sluice.Request{Key: key, Limit: limit, Cost: 1})
		if err == nil && !d.Allowed {
			err = fmt.Errorf("denied: %+v", d)
		}
		return err
	}
	redisRate = func(key string) error {
		res, err := rl.Allow(ctx, key, rrLimit)
		if err == nil && res.Allowed == 0 {
			err = fmt.Errorf("denied: %+v", res)
		}
		return err
	}
	return sluiceGCRA, redisRate
}

// BenchmarkRedis compares, on one throw-away redis-server: sluice's GCRA
// through rueidis, go-redis/redis_rate's GCRA through go-redis, a plain
// INCR and a PING through rueidis, at 1, 16 and 64 callers on 10k keys; and
// redis-benchmark -P 16 running sluice's script itself, the server's
// ceiling for it.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Standalone(b)
	rc := rueidisClient(b, srv.Addr)
	gr := goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 128})
	defer gr.Close()
	sluiceGCRA, redisRate := gcraChecks(rc, gr, "bench:")
	ctx := context.Background()

	for _, callers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("sluice-gcra/callers=%d", callers), func(b *testing.B) {
			reset := scriptTime(b, rc)
			drive(b, callers, sluiceGCRA)
			reset()
		})
		b.Run(fmt.Sprintf("redis_rate-gcra/callers=%d", callers), func(b *testing.B) {
			reset := scriptTime(b, rc)
			drive(b, callers, redisRate)
			reset()
		})
		b.Run(fmt.Sprintf("rueidis-incr/callers=%d", callers), func(b *testing.B) {
			drive(b, callers, func(key string) error {
				return rc.Do(ctx, rc.B().Incr().Key("bench:incr:"+key).Build()).Error()
			})
		})
		b.Run(fmt.Sprintf("rueidis-ping/callers=%d", callers), func(b *testing.B) {
			drive(b, callers, func(string) error {
				return rc.Do(ctx, rc.B().Ping().Build()).Error()
			})
		})
	}
	b.Run("redis-benchmark-c1-p50", func(b *testing.B) {
		// One connection, no pipelining: the p50 round trip of a PING, of a
		// script doing only GET, TIME and SET, and of sluice's function,
		// and the time Redis spends in each script call. The second is the
		// floor any atomic read-modify-write script has here.
		fn := loadLibrary(b, srv)
		bare := srv.Do("SCRIPT", "LOAD", "redis.call('GET', KEYS[1]); redis.call('TIME'); redis.call('SET', KEYS[1], 'x', 'PX', 1000); return 1")
		period := strconv.FormatInt(int64(benchLimit.Period/time.Microsecond), 10)
		for _, c := range []struct {
			name string
			args []string
		}{
			{"ping", []string{"PING"}},
			{"get-time-set-script", []string{"EVALSHA", bare, "1", "bench:{k-__rand_int__}"}},
			{"sluice-function", []string{"FCALL", fn, "1", "bench:{key-__rand_int__}:gcra:" + period,
				"-1", "1", "6 " + strconv.FormatInt(benchLimit.Rate, 10) + " " + period + " " + strconv.FormatInt(benchLimit.Burst, 10), "1", "0", "1", "1"}},
		} {
			resetStats(b, rc)
			b.ReportMetric(redisBenchmark(b, srv, 20_000, 1, 1, c.args).p50, c.name+"-p50-µs")
			if c.name != "ping" {
				b.ReportMetric(scriptUsec(b, rc)/20_000, c.name+"-redis-µs")
			}
		}
		b.ReportMetric(0, "ns/op")
	})
	b.Run("redis-benchmark-P16-script", func(b *testing.B) {
		rps := scriptCeiling(b, srv)
		b.ReportMetric(rps, "checks/s")
		b.ReportMetric(0, "ns/op")
	})
	srv.Do("FLUSHALL")
}

// BenchmarkRedisOneCaller compares one caller's round trip, the latency a
// request waits for its check when nothing else is in flight: sluice's
// GCRA through rueidis and go-redis/redis_rate's GCRA through go-redis,
// on one redis-server, in five rounds of b.N checks each that alternate
// between the two. It reports each one's p50 (the median over rounds) and
// the median of the rounds' ratios of sluice's p50 to redis_rate's.
// sluice-after-overlap is a second store, on a client of its own, that
// served 16 callers at once before its rounds: a lone caller after a
// burst, as in any service that ever had two requests at once.
//
//	cd bench && go test -run '^$' -bench RedisOneCaller -benchtime 5000x -count 3 .
func BenchmarkRedisOneCaller(b *testing.B) {
	srv := redistest.Standalone(b)
	rc := rueidisClient(b, srv.Addr)
	gr := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer gr.Close()
	sluiceGCRA, redisRate := gcraChecks(rc, gr, "bench:one:")
	afterOverlap, _ := gcraChecks(rueidisClient(b, srv.Addr), gr, "bench:overlap:")
	if _, _, err := load(16, 16_000, afterOverlap); err != nil {
		b.Fatal(err)
	}
	ops := []func(key string) error{sluiceGCRA, redisRate, afterOverlap}
	const rounds = 5
	p50 := make([][]float64, len(ops))
	var ratios, afterRatios []float64
	b.ResetTimer()
	for range rounds {
		for i, op := range ops {
			_, all, err := load(1, b.N, op)
			if err != nil {
				b.Fatal(err)
			}
			p50[i] = append(p50[i], float64(all[len(all)/2].Nanoseconds())/1e3)
		}
		ratios = append(ratios, p50[0][len(p50[0])-1]/p50[1][len(p50[1])-1])
		afterRatios = append(afterRatios, p50[2][len(p50[2])-1]/p50[1][len(p50[1])-1])
	}
	b.StopTimer()
	b.ReportMetric(median(p50[0]), "sluice-p50-µs")
	b.ReportMetric(median(p50[1]), "redis_rate-p50-µs")
	b.ReportMetric(median(p50[2]), "sluice-after-overlap-p50-µs")
	b.ReportMetric(median(ratios), "sluice-vs-redis_rate")
	b.ReportMetric(median(afterRatios), "after-overlap-vs-redis_rate")
	b.ReportMetric(0, "ns/op")
}

var (
	rpsLine = regexp.MustCompile(`([0-9.]+) requests per second`)
	p50Line = regexp.MustCompile(`p50=([0-9.]+) msec`)
)

type benchResult struct{ rps, p50 float64 }

// redisBenchmark runs redis-benchmark against srv with n requests, c
// connections and pipeline p, keys over 10k values, and returns its rate
// and p50 latency (µs).
func redisBenchmark(b *testing.B, srv *redistest.Server, n, c, p int, args []string) benchResult {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Skip("redis-benchmark is not on PATH")
	}
	host, port := "127.0.0.1", srv.Addr[len("127.0.0.1:"):]
	full := append([]string{"-h", host, "-p", port, "-n", strconv.Itoa(n), "-c", strconv.Itoa(c), "-P", strconv.Itoa(p), "-r", "10000", "-q"}, args...)
	out, err := exec.Command(bin, full...).CombinedOutput()
	if err != nil {
		b.Fatalf("redis-benchmark: %v: %s", err, out)
	}
	m := rpsLine.FindSubmatch(out)
	if m == nil {
		b.Fatalf("redis-benchmark printed no rate: %s", out)
	}
	var r benchResult
	r.rps, _ = strconv.ParseFloat(string(m[1]), 64)
	if m := p50Line.FindSubmatch(out); m != nil {
		ms, _ := strconv.ParseFloat(string(m[1]), 64)
		r.p50 = ms * 1000
	}
	return r
}

// loadLibrary loads sluice's Redis Functions library into srv and returns
// the name of its function.
func loadLibrary(b *testing.B, srv *redistest.Server) string {
	src, fn := redisstore.Library()
	if got := srv.Do("FUNCTION", "LOAD", "REPLACE", src); !strings.HasPrefix(fn, got) || got == "" {
		b.Fatalf("FUNCTION LOAD = %q, want %s", got, fn)
	}
	return fn
}

// scriptCeiling runs sluice's function with redis-benchmark: 64
// connections, 16 commands pipelined each, keys over 10k values, and
// returns its requests per second.
func scriptCeiling(b *testing.B, srv *redistest.Server) float64 {
	fn := loadLibrary(b, srv)
	period := strconv.FormatInt(int64(benchLimit.Period/time.Microsecond), 10)
	return redisBenchmark(b, srv, max(b.N, 200_000), 64, 16, []string{"FCALL", fn, "1", "bench:{key-__rand_int__}:gcra:" + period,
		"-1", "1", "6 " + strconv.FormatInt(benchLimit.Rate, 10) + " " + period + " " + strconv.FormatInt(benchLimit.Burst, 10), "1", "0", "1", "1"}).rps
}

// BenchmarkRedisLatencyKnee measures, with one caller through rueidis, the
// p50 round trip of a Redis function that only spins for a given number
// of Lua loop iterations, against the server time it takes: on this
// machine the round trip hides a few microseconds of server time, and
// beyond that each microsecond of it shows in the p50 (more than one for
// one, as the client's wake-up gets slower). It is why the 1-caller p50 of
// any decision kept atomic in Redis sits near 1.3× a PING here.
func BenchmarkRedisLatencyKnee(b *testing.B) {
	rc := rueidisClient(b, redistest.Standalone(b).Addr)
	ctx := context.Background()
	lib := "#!lua name=knee\nredis.register_function('spin', function(keys, args)\n" +
		"  local x = 0\n  for i = 1, tonumber(args[1]) do x = x + i end\n  return x\nend)"
	if err := rc.Do(ctx, rc.B().FunctionLoad().Replace().FunctionCode(lib).Build()).Error(); err != nil {
		b.Fatal(err)
	}
	b.Run("ping", func(b *testing.B) {
		drive(b, 1, func(string) error { return rc.Do(ctx, rc.B().Ping().Build()).Error() })
	})
	for _, n := range []int{0, 1000, 2000, 4000, 8000} {
		b.Run(fmt.Sprint("spin=", n), func(b *testing.B) {
			report := scriptTime(b, rc)
			arg := strconv.Itoa(n)
			drive(b, 1, func(string) error {
				return rc.Do(ctx, rc.B().Fcall().Function("spin").Numkeys(0).Arg(arg).Build()).Error()
			})
			report()
		})
	}
}

// BenchmarkRedisHotKey is one hot key at 1000/1m from 64 callers, past
// its limit after the first 1000 checks: the sliding log, whose state is an
// entry per instant, against GCRA's one number, on one redis-server.
func BenchmarkRedisHotKey(b *testing.B) {
	srv := redistest.Standalone(b)
	store := redisstore.New(rueidisClient(b, srv.Addr), redisstore.Options{Prefix: "bench:"})
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.SlidingLog} {
		b.Run(fmt.Sprintf("%v/callers=64", alg), func(b *testing.B) {
			limit := sluice.Limit{Algorithm: alg, Rate: 1000, Period: time.Minute}
			key := fmt.Sprint("hot:", alg, ":", hotRun.Add(1))
			drive(b, 64, func(string) error {
				_, err := store.Take(context.Background(), sluice.Request{Key: key, Limit: limit, Cost: 1})
				return err
			})
		})
	}
}
