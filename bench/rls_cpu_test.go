package bench

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
)

// rlsServerChild is the environment variable that makes the test binary
// serve RLS in a process of its own: "empty" (an empty handler on sluice's
// gRPC transport, server.TransportOptions) or "sluice" (sluice serve on
// the memory store, or on the Redis at rlsServerRedis when that is set).
// See BenchmarkRLSServerCPU.
const (
	rlsServerChild = "SLUICE_BENCH_RLS_SERVER"
	rlsServerRedis = "SLUICE_BENCH_RLS_REDIS"
	// rlsServerProfile names files for the server processes' CPU
	// profiles, its value with each one's kind appended (".sluice",
	// ".empty"), and their allocation profiles (".sluice.allocs"),
	// written when they stop: where the CPU and the garbage per check
	// come from.
	rlsServerProfile = "SLUICE_BENCH_SERVER_CPUPROFILE"
)

// serveRLSChild serves kind on loopback, prints its address, and serves
// until its stdin closes.
func serveRLSChild(kind string) {
	if path := os.Getenv(rlsServerProfile); path != "" {
		f, err := os.Create(path + "." + kind)
		if err != nil {
			panic(err)
		}
		pprof.StartCPUProfile(f)
		defer f.Close()
		defer pprof.StopCPUProfile()
		defer func() {
			m, err := os.Create(path + "." + kind + ".allocs")
			if err != nil {
				panic(err)
			}
			defer m.Close()
			pprof.Lookup("allocs").WriteTo(m, 0)
		}()
	}
	var addr string
	switch kind {
	case "empty":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		go newEmpty().Serve(l)
		addr = l.Addr().String()
	default:
		s, err := server.New(server.Options{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RedisURL: os.Getenv(rlsServerRedis),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			panic(err)
		}
		if err := s.Start(); err != nil {
			panic(err)
		}
		addr = s.Addrs().GRPC
	}
	fmt.Println(addr)
	io.Copy(io.Discard, os.Stdin)
}

// rlsChild is a server process and the CPU it has used.
type rlsChild struct {
	pid  int
	addr string
}

func startRLSChild(b *testing.B, kind string, env ...string) rlsChild {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), rlsServerChild+"="+kind, "GOMAXPROCS=2"), env...)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	return rlsChild{pid: cmd.Process.Pid, addr: strings.TrimSpace(line)}
}

// cpu returns the CPU time the child has used.
func (c rlsChild) cpu(b *testing.B) time.Duration {
	d, err := proc.CPU(c.pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkRLSServerCPU measures the CPU a server process spends per
// envoy.service.ratelimit.v3 check: sluice serve on the memory store (the
// embedded config's remote_address limit, 10k descriptors always allowed)
// against an empty handler on the same gRPC transport, each in a process
// of its own (GOMAXPROCS=2) driven by 64 callers from this one, in rounds
// that alternate between the two. It reports each one's server CPU per
// check and the median ratio of the rounds: what the decision costs.
//
//	cd bench && go test -run '^$' -bench RLSServerCPU -benchtime 100000x -count 3 .
func BenchmarkRLSServerCPU(b *testing.B) {
	empty, sluice := startRLSChild(b, "empty"), startRLSChild(b, "sluice")
	checks := []func() error{rlsClient(b, empty.addr), rlsClient(b, sluice.addr)}
	children := []rlsChild{empty, sluice}
	const rounds = 5
	per := make([][]float64, 2)
	b.ResetTimer()
	for range rounds {
		for i, check := range checks {
			before := children[i].cpu(b)
			if _, _, err := load(64, b.N, func(string) error { return check() }); err != nil {
				b.Fatal(err)
			}
			per[i] = append(per[i], float64((children[i].cpu(b)-before).Microseconds())/float64(b.N))
		}
	}
	b.StopTimer()
	var ratios []float64 // none when the rounds were too short to show CPU (10ms ticks)
	for r := range rounds {
		if per[0][r] > 0 {
			ratios = append(ratios, per[1][r]/per[0][r])
		}
	}
	slices.Sort(ratios)
	ratio := 0.0
	if len(ratios) > 0 {
		ratio = ratios[len(ratios)/2]
	}
	for i := range per {
		slices.Sort(per[i])
	}
	b.ReportMetric(per[0][rounds/2], "empty-cpu-µs/check")
	b.ReportMetric(per[1][rounds/2], "sluice-cpu-µs/check")
	b.ReportMetric(ratio, "sluice-vs-empty")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRLSServerCPURedis measures the CPU sluice serve on Redis spends
// per envoy.service.ratelimit.v3 check, in a process of its own
// (GOMAXPROCS=2) on a throw-away redis-server, driven by 64 callers from
// this one that send a deadline with every check, as Envoy does (1 s, so
// that none runs out on a busy machine): the median of five rounds.
//
//	cd bench && go test -run '^$' -bench RLSServerCPURedis -benchtime 50000x -count 3 .
func BenchmarkRLSServerCPURedis(b *testing.B) {
	srv := redistest.Standalone(b)
	child := startRLSChild(b, "sluice", rlsServerRedis+"="+srv.URL())
	check := rlsClientWant(b, child.addr, rlspb.RateLimitResponse_OK, time.Second)
	const rounds = 5
	var per []float64
	b.ResetTimer()
	for range rounds {
		before := child.cpu(b)
		if _, _, err := load(64, b.N, func(string) error { return check() }); err != nil {
			b.Fatal(err)
		}
		per = append(per, float64((child.cpu(b)-before).Microseconds())/float64(b.N))
	}
	b.StopTimer()
	slices.Sort(per)
	b.ReportMetric(per[rounds/2], "sluice-cpu-µs/check")
	b.ReportMetric(0, "ns/op")
}
