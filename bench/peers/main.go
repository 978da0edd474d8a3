// Command peers runs sluice serve beside the services it is compared with,
// on this machine, and prints how they compare: checks per second, the
// server's CPU per check, and its resident memory idle and under load.
//
//	cd bench && go run ./peers -envoy-rl PATH [-gubernator PATH]
//
// PATH is a binary you built as its project's Dockerfile builds its
// release: envoyproxy/ratelimit's (`CGO_ENABLED=0 go build -ldflags="-w
// -s" -o ratelimit ./src/service_cmd` in its repository) and gubernator's
// (`CGO_ENABLED=0 go build -ldflags="-w -s" ./cmd/gubernator` in
// gubernator-io/gubernator's). sluice is built from this tree as
// deploy/Dockerfile builds it. redis-server must be on PATH.
//
// Envoy RLS v3: envoyproxy/ratelimit on Redis, an empty handler served
// by grpc-go on sluice's gRPC transport (its codec, goroutine pool and
// windows: what carrying a check costs sluice before it decides anything),
// sluice on its memory store and on the same Redis, every check one
// descriptor (remote_address) of 10,000 values under one envoy-format
// limit that never denies. With
// -gubernator, a second table compares gubernator's HTTP API
// (POST /v1/GetRateLimits) with sluice's (POST /v1/check), a token bucket
// on each one's memory. Each round runs every system in turn on the same
// load, so that the machine's drift moves them together; a ratio is the
// median over rounds of the ratio within a round, with its range.
//
// Every server process has the machine's CPUs; the load generator is this
// process. CPU is read from /proc/PID/stat, memory from VmRSS and RssFile
// (the pages of the executable and other files mapped) in
// /proc/PID/status, sampled every 10 ms during the load (the most seen)
// and once after start (idle).
//
// Each check carries a deadline (-deadline, 1 s by default), which gRPC
// sends as grpc-timeout: Envoy's rate-limit filter sends its timeout with
// every check (20 ms unless set), and a server's cost per check includes
// what it does with one. A check not answered within it is counted (a row
// of the table), as Envoy's filter would fail it by its failure mode, and
// the load goes on; any other error ends the run.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/internal/server"
)

// emptyChild is the environment variable that makes this program serve an
// empty RLS handler on the address it holds: the transport's own cost per
// check.
const emptyChild = "SLUICE_PEERS_EMPTY_RLS"

func main() {
	if addr := os.Getenv(emptyChild); addr != "" {
		serveEmpty(addr)
		return
	}
	envoyRL := flag.String("envoy-rl", "", "envoyproxy/ratelimit binary (required)")
	guber := flag.String("gubernator", "", "gubernator binary: adds the HTTP table")
	sluiceBin := flag.String("sluice", "", "sluice binary; empty: built from this tree")
	sluiceEnv := flag.String("sluice-env", "", "comma-separated KEY=VALUE set for sluice serve alone, such as GOGC=50")
	rounds := flag.Int("rounds", 5, "rounds, each running every system in turn")
	checks := flag.Int("checks", 40000, "checks per system per round")
	values := flag.Int("values", 10000, "descriptor values (client addresses)")
	callers := flag.String("callers", "64,256", "concurrent callers, one table row group each")
	conns := flag.Int("conns", 4, "connections per system the callers share")
	deadline := flag.Duration("deadline", time.Second, "each check's deadline, sent as Envoy sends its filter's timeout; 0: none")
	flag.Parse()
	if *envoyRL == "" {
		fmt.Fprintln(os.Stderr, "peers: -envoy-rl PATH is required (flag -h for usage)")
		os.Exit(2)
	}
	var levels []int
	for f := range strings.SplitSeq(*callers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			log.Fatalf("peers: -callers %q: want numbers above 0, comma-separated", *callers)
		}
		levels = append(levels, n)
	}
	dir, err := os.MkdirTemp("", "sluice-peers-")
	if err != nil {
		log.Fatal(err)
	}
	r := &run{dir: dir, checks: *checks, values: *values, conns: *conns, deadline: *deadline}
	if *sluiceEnv != "" {
		for kv := range strings.SplitSeq(*sluiceEnv, ",") {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				log.Fatalf("peers: -sluice-env %q: want KEY=VALUE, comma-separated", *sluiceEnv)
			}
			r.sluiceEnv = append(r.sluiceEnv, kv)
		}
	}
	defer r.stop()
	if err := r.main(*envoyRL, *guber, *sluiceBin, *rounds, levels); err != nil {
		r.stop()
		log.Fatal("peers: ", err)
	}
}

// run is one comparison: the processes it started and where they live.
type run struct {
	dir                   string
	checks, values, conns int
	deadline              time.Duration // of each check; 0: none
	sluiceEnv             []string      // for sluice serve alone
	procs                 []*exec.Cmd
}

// system is one server under test and how to send it one check.
type system struct {
	name  string
	pid   int
	check func(ctx context.Context, value string) error
	idle  proc.Resident // after start
	// metrics is the server's Prometheus endpoint when it reports the Go
	// runtime's (sluice serve's /metrics): where its stacks are read.
	metrics string
}

// round is what one system did in one round.
type round struct {
	perSecond float64
	cpu       float64 // server µs per check
	redisCPU  float64 // redis-server µs per check
	rss, file int64   // most seen of each, bytes
	late      int64   // checks not answered within the deadline
	stacks    int64   // the Go runtime's stacks in use as the load ends, bytes; 0: not known
}

const (
	domain   = "bench"
	envoyCfg = `domain: bench
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 1000000000
`
	// sluiceCfg holds the same domain and a policy for the HTTP API.
	sluiceCfg = `policies:
  - name: bench
    limit: token_bucket 1000000000/1h
domains:
  - ` + "domain: bench\n    descriptors:\n      - key: remote_address\n        rate_limit:\n          unit: hour\n          requests_per_unit: 1000000000\n"
)

func (r *run) main(envoyRL, guber, sluiceBin string, rounds int, levels []int) error {
	if sluiceBin == "" {
		sluiceBin = filepath.Join(r.dir, "sluice")
		// In sluice's own module, whose go.sum holds what the command
		// needs beyond what this module imports.
		dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/sluicehq/sluice").Output()
		if err != nil {
			return fmt.Errorf("finding sluice's module: %w", err)
		}
		build := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace,vtprotobuf", "-ldflags=-s -w", "-o", sluiceBin, "./cmd/sluice") // as deploy/Dockerfile
		build.Dir, build.Stderr = strings.TrimSpace(string(dir)), os.Stderr
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if err := build.Run(); err != nil {
			return fmt.Errorf("building sluice: %w", err)
		}
	}
	redisAddr, redisPID, err := r.startRedis()
	if err != nil {
		return err
	}
	cfgDir := filepath.Join(r.dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(envoyCfg), 0o644); err != nil {
		return err
	}
	sluiceFile := filepath.Join(r.dir, "sluice.yaml")
	if err := os.WriteFile(sluiceFile, []byte(sluiceCfg), 0o644); err != nil {
		return err
	}

	var grpcSystems []*system
	envoyGRPC := freeAddr()
	s, err := r.start("envoyproxy/ratelimit", envoyGRPC, r.rls, envoyRL, nil,
		"USE_STATSD=false", "LOG_LEVEL=error", "BACKEND_TYPE=redis",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+filepath.Join(r.dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_WATCH_ROOT=false", "HOST=127.0.0.1", "PORT="+port(freeAddr()),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+port(envoyGRPC),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+port(freeAddr()))
	if err != nil {
		return err
	}
	grpcSystems = append(grpcSystems, s)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	emptyAddr := freeAddr()
	if s, err = r.start("empty handler, same transport", emptyAddr, r.rls, self, nil, emptyChild+"="+emptyAddr); err != nil {
		return err
	}
	grpcSystems = append(grpcSystems, s)
	var httpSystems []*system
	for _, store := range []string{"memory", "Redis"} {
		grpcAddr, httpAddr := freeAddr(), freeAddr()
		args := []string{"serve", "-config", sluiceFile, "-grpc", grpcAddr, "-http", httpAddr, "-log-level", "error"}
		if store == "Redis" {
			args = append(args, "-redis", "redis://"+redisAddr)
		}
		s, err := r.start("sluice, "+store, grpcAddr, r.rls, sluiceBin, args, r.sluiceEnv...)
		if err != nil {
			return err
		}
		s.metrics = "http://" + httpAddr + "/metrics"
		grpcSystems = append(grpcSystems, s)
		if store == "memory" && guber != "" {
			httpSystems = append(httpSystems, &system{name: "sluice, memory", pid: s.pid, idle: s.idle, check: sluiceHTTP(httpAddr), metrics: s.metrics})
		}
	}
	if guber != "" {
		grpcAddr, httpAddr := freeAddr(), freeAddr()
		s, err := r.start("gubernator", httpAddr, gubernatorHTTP, guber, nil,
			"GUBER_GRPC_ADDRESS="+grpcAddr, "GUBER_HTTP_ADDRESS="+httpAddr,
			"GUBER_ADVERTISE_ADDRESS="+grpcAddr, "GUBER_PEER_DISCOVERY_TYPE=none",
			"GUBER_LOG_LEVEL=error")
		if err != nil {
			return err
		}
		httpSystems = append([]*system{s}, httpSystems...)
	}

	fmt.Printf("%s, %d CPUs, %s; %d rounds of %d checks per system over %d values, %d connections per system, deadline %v",
		cpuModel(), runtime.NumCPU(), runtime.Version(), rounds, r.checks, r.values, r.conns, r.deadline)
	if len(r.sluiceEnv) > 0 {
		fmt.Printf("; sluice with %s", strings.Join(r.sluiceEnv, " "))
	}
	fmt.Print("\n\n")
	for _, c := range levels {
		res, err := r.rounds(grpcSystems, rounds, c, redisPID)
		if err != nil {
			return err
		}
		printTable(fmt.Sprintf("Envoy RLS v3, %d callers", c), grpcSystems, res, true)
	}
	if len(httpSystems) > 0 {
		for _, c := range levels {
			res, err := r.rounds(httpSystems, rounds, c, 0)
			if err != nil {
				return err
			}
			printTable(fmt.Sprintf("HTTP JSON API, %d callers", c), httpSystems, res, false)
		}
	}
	return nil
}

// start runs bin with args and env, waits until its check answers, and
// returns it as a system with its idle RSS.
func (r *run) start(name, addr string, client func(addr string, conns int) (func(context.Context, string) error, error), bin string, args []string, env ...string) (*system, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r.procs = append(r.procs, cmd)
	check, err := client(addr, r.conns)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = check(ctx, "10.0.0.1")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s did not answer at %s in 30s: %v; its stderr:\n%s", name, addr, err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // let start-up's garbage be collected
	idle, err := proc.Memory(cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	return &system{name: name, pid: cmd.Process.Pid, check: check, idle: idle}, nil
}

func (r *run) stop() {
	for _, p := range r.procs {
		p.Process.Kill()
		p.Wait()
	}
	r.procs = nil
	os.RemoveAll(r.dir)
}

func (r *run) startRedis() (addr string, pid int, err error) {
	addr = freeAddr()
	cmd := exec.Command("redis-server", "--port", port(addr), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir)
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return "", 0, fmt.Errorf("redis-server: %w", err)
	}
	r.procs = append(r.procs, cmd)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr, cmd.Process.Pid, nil
		}
		if time.Now().After(deadline) {
			return "", 0, fmt.Errorf("redis-server did not listen on %s in 10s", addr)
		}
	}
}

// rounds runs every system in turn, rounds times, with c callers.
func (r *run) rounds(systems []*system, rounds, c, redisPID int) ([][]round, error) {
	res := make([][]round, len(systems))
	for range rounds {
		for i, s := range systems {
			rd, err := r.load(s, c, redisPID)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			res[i] = append(res[i], rd)
		}
	}
	return res, nil
}

// load sends r.checks checks to s from c callers and measures it.
func (r *run) load(s *system, c, redisPID int) (round, error) {
	var rd round
	done := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Go(func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if m, err := proc.Memory(s.pid); err == nil {
				rd.rss, rd.file = max(rd.rss, m.Total), max(rd.file, m.File)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	cpu0, err := proc.CPU(s.pid)
	if err != nil {
		return rd, err
	}
	var redis0 time.Duration
	if redisPID != 0 {
		redis0, _ = proc.CPU(redisPID)
	}
	var next, late atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(r.checks) || failed.Load() != nil {
					return
				}
				if err := r.check(s, value(int(i)%r.values)); err != nil {
					if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
						late.Add(1) // as Envoy's filter would, on its failure mode: counted, not fatal
						continue
					}
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if s.metrics != "" {
		// Read before the collector runs idle: it shrinks the stacks of
		// workers no longer in a call.
		rd.stacks, _ = goStacks(s.metrics)
	}
	close(done)
	sampled.Wait()
	if err := failed.Load(); err != nil {
		return rd, *err
	}
	cpu1, err := proc.CPU(s.pid)
	if err != nil {
		return rd, err
	}
	rd.late = late.Load()
	rd.perSecond = float64(r.checks) / elapsed.Seconds()
	rd.cpu = float64((cpu1 - cpu0).Microseconds()) / float64(r.checks)
	if redisPID != 0 {
		redis1, _ := proc.CPU(redisPID)
		rd.redisCPU = float64((redis1 - redis0).Microseconds()) / float64(r.checks)
	}
	return rd, nil
}

func value(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) }

// check sends s one check of value, with r's deadline.
func (r *run) check(s *system, value string) error {
	if r.deadline <= 0 {
		return s.check(context.Background(), value)
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.deadline)
	defer cancel()
	return s.check(ctx, value)
}

// rls returns a check that sends one ShouldRateLimit over conns
// connections in turn, an error unless it is answered OK.
func (r *run) rls(addr string, conns int) (func(context.Context, string) error, error) {
	clients := make([]rlspb.RateLimitServiceClient, conns)
	for i := range clients {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		clients[i] = rlspb.NewRateLimitServiceClient(cc)
	}
	var n atomic.Uint64
	return func(ctx context.Context, v string) error {
		c := clients[n.Add(1)%uint64(len(clients))]
		resp, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, HitsAddend: 1,
			Descriptors: []*extrl.RateLimitDescriptor{{Entries: []*extrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: v}}}}})
		if err != nil {
			return err
		}
		if resp.OverallCode != rlspb.RateLimitResponse_OK {
			return fmt.Errorf("answered %s", resp.OverallCode)
		}
		return nil
	}, nil
}

// emptyRLS answers OK at once.
type emptyRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (emptyRLS) ShouldRateLimit(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
}

// serveEmpty serves emptyRLS on addr until killed, on sluice's gRPC
// transport: what sluice serve costs beyond it is its decision.
func serveEmpty(addr string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer(server.TransportOptions()...)
	rlspb.RegisterRateLimitServiceServer(s, emptyRLS{})
	log.Fatal(s.Serve(l))
}

// httpClient is shared by the HTTP checks: keep-alive connections enough
// for every caller.
var httpClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}

func post(ctx context.Context, url, body, want string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(got, []byte(want)) {
		return fmt.Errorf("answered %d: %.200s", resp.StatusCode, got)
	}
	return nil
}

func sluiceHTTP(addr string) func(context.Context, string) error {
	url := "http://" + addr + "/v1/check"
	return func(ctx context.Context, v string) error {
		return post(ctx, url, `{"checks":[{"policy":"bench","key":"`+v+`"}]}`, `"allowed":true`)
	}
}

func gubernatorHTTP(addr string, _ int) (func(context.Context, string) error, error) {
	url := "http://" + addr + "/v1/GetRateLimits"
	return func(ctx context.Context, v string) error {
		// A token bucket (algorithm 0) of 1e9 an hour, as sluice's policy.
		body := `{"requests":[{"name":"bench","unique_key":"` + v + `","hits":1,"limit":1000000000,"duration":3600000}]}`
		return post(ctx, url, body, `"remaining"`)
	}, nil
}

func printTable(title string, systems []*system, res [][]round, redis bool) {
	fmt.Printf("%s | %s\n", title, strings.Join(names(systems), " | "))
	fmt.Printf("---%s\n", strings.Repeat(" | ---", len(systems)))
	row := func(label string, f func(i int) string) {
		cells := make([]string, len(systems))
		for i := range systems {
			cells[i] = f(i)
		}
		fmt.Printf("%s | %s\n", label, strings.Join(cells, " | "))
	}
	of := func(i int, f func(round) float64) []float64 {
		var v []float64
		for _, rd := range res[i] {
			v = append(v, f(rd))
		}
		return v
	}
	ratio := func(i int, f func(round) float64) string {
		if i == 0 {
			return "1"
		}
		var v []float64
		for r := range res[i] {
			if base := f(res[0][r]); base > 0 {
				v = append(v, f(res[i][r])/base)
			}
		}
		if len(v) == 0 {
			return "–"
		}
		slices.Sort(v)
		return fmt.Sprintf("%.2f× (%.2f–%.2f)", v[len(v)/2], v[0], v[len(v)-1])
	}
	perSecond := func(rd round) float64 { return rd.perSecond }
	cpu := func(rd round) float64 { return rd.cpu }
	rss := func(rd round) float64 { return float64(rd.rss) }
	row("checks/s, median", func(i int) string { return fmt.Sprintf("%.0f", median(of(i, perSecond))) })
	row("checks/s ÷ "+systems[0].name, func(i int) string { return ratio(i, perSecond) })
	row("checks past their deadline, all rounds", func(i int) string {
		var n int64
		for _, rd := range res[i] {
			n += rd.late
		}
		return strconv.FormatInt(n, 10)
	})
	row("server CPU per check, median", func(i int) string { return fmt.Sprintf("%.1f µs", median(of(i, cpu))) })
	row("server CPU ÷ "+systems[0].name, func(i int) string { return ratio(i, cpu) })
	if redis {
		row("redis-server CPU per check", func(i int) string {
			if m := median(of(i, func(rd round) float64 { return rd.redisCPU })); m >= 0.05 {
				return fmt.Sprintf("%.1f µs", m)
			}
			return "–"
		})
	}
	row("server RSS under load, most", func(i int) string {
		v := of(i, rss)
		return fmt.Sprintf("%.0f–%.0f MB", slices.Min(v)/1e6, slices.Max(v)/1e6)
	})
	row("of it, Go stacks in use as the load ends (/metrics)", func(i int) string {
		v := of(i, func(rd round) float64 { return float64(rd.stacks) })
		if slices.Min(v) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f–%.1f MB", slices.Min(v)/1e6, slices.Max(v)/1e6)
	})
	row("server RSS idle, after start", func(i int) string { return fmt.Sprintf("%.0f MB", float64(systems[i].idle.Total)/1e6) })
	row("of RSS, the executable's and other files' pages, under load / idle", func(i int) string {
		v := of(i, func(rd round) float64 { return float64(rd.file) })
		return fmt.Sprintf("%.0f–%.0f / %.0f MB", slices.Min(v)/1e6, slices.Max(v)/1e6, float64(systems[i].idle.File)/1e6)
	})
	fmt.Println()
}

// goStacks reads go_memstats_stack_inuse_bytes from a Prometheus
// endpoint.
func goStacks(url string) (int64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_stack_inuse_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("%s: no go_memstats_stack_inuse_bytes", url)
}

func names(systems []*system) []string {
	var n []string
	for _, s := range systems {
		n = append(n, s.name)
	}
	return n
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// freeAddr returns a loopback address with a port free at the moment.
func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func cpuModel() string {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.SplitSeq(string(info), "\n") {
		if name, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
		}
	}
	return "unknown CPU"
}
