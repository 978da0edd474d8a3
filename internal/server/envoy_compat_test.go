package server

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
)

// compatCase is one line of testdata/envoy/cases.txt.
type compatCase struct {
	line     int
	only     string // "sluice" or "envoyproxy/ratelimit": an answer only it gives, by choice; "" both
	domain   string
	descs    [][][2]string
	dhits    []*wrapperspb.UInt64Value // a descriptor's own hits_addend (key=value@N), or nil
	hits     uint32
	overall  string
	statuses []compatStatus
	repeat   int
}

type compatStatus struct {
	code      string
	rate      uint32
	unit      string // "" for no current limit
	remaining int64
	countdown bool // remaining counts down by hits on each repeat
	name      string
}

func readCompatCases(t *testing.T, path string) []compatCase {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []compatCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(why string) { t.Fatalf("%s:%d: %s: %q", path, n, why, line) }
		c := compatCase{line: n, repeat: 1}
		for _, only := range []string{"sluice", "envoyproxy/ratelimit"} {
			if rest, ok := strings.CutPrefix(line, only+": "); ok {
				c.only, line = only, rest
			}
		}
		if i := strings.LastIndex(line, " x"); i > 0 {
			if r, err := strconv.Atoi(line[i+2:]); err == nil {
				c.repeat, line = r, line[:i]
			}
		}
		req, want, ok := strings.Cut(line, " => ")
		if !ok {
			bad("no =>")
		}
		fields := strings.Fields(req)
		if len(fields) < 3 {
			bad("want domain, descriptors and hits")
		}
		c.domain = fields[0]
		hits, err := strconv.ParseUint(fields[len(fields)-1], 10, 32)
		if err != nil {
			bad("hits")
		}
		c.hits = uint32(hits)
		for _, d := range strings.Split(strings.Join(fields[1:len(fields)-1], " "), ";") {
			d = strings.TrimSpace(d)
			var dh *wrapperspb.UInt64Value
			if i := strings.LastIndexByte(d, '@'); i >= 0 {
				h, err := strconv.ParseUint(d[i+1:], 10, 64)
				if err != nil {
					bad("a descriptor's hits")
				}
				d, dh = d[:i], wrapperspb.UInt64(h)
			}
			c.dhits = append(c.dhits, dh)
			var entries [][2]string
			for _, e := range strings.Split(d, ",") {
				k, v, _ := strings.Cut(e, "=")
				entries = append(entries, [2]string{k, v})
			}
			c.descs = append(c.descs, entries)
		}
		overall, statuses, ok := strings.Cut(want, " | ")
		if !ok {
			bad("no |")
		}
		c.overall = strings.TrimSpace(overall)
		for _, s := range strings.Split(statuses, ";") {
			f := strings.Fields(s)
			if len(f) < 3 {
				bad("a status is CODE LIMIT REMAINING [NAME]")
			}
			st := compatStatus{code: f[0]}
			if f[1] != "-" {
				rate, unit, _ := strings.Cut(f[1], "/")
				r, err := strconv.ParseUint(rate, 10, 32)
				if err != nil {
					bad("limit")
				}
				st.rate, st.unit = uint32(r), unit
			}
			rem := f[2]
			st.countdown = strings.HasSuffix(rem, "-")
			st.remaining, err = strconv.ParseInt(strings.TrimSuffix(rem, "-"), 10, 64)
			if err != nil {
				bad("remaining")
			}
			if len(f) > 3 {
				st.name = f[3]
			}
			c.statuses = append(c.statuses, st)
		}
		if len(c.statuses) != len(c.descs) {
			bad("one status per descriptor")
		}
		cases = append(cases, c)
	}
	return cases
}

var unitSeconds = map[string]int64{"second": 1, "minute": 60, "hour": 3600, "day": 86400}

// envoyproxy/ratelimit's answers, from its own integration tests and
// README, replayed over gRPC against `sluice serve` on its config files
// (a runtime directory) and a real Redis: the same code, current limit,
// remaining and name for every descriptor, and duration_until_reset within
// a second of the window's end. SLUICE_ENVOY_RATELIMIT_ADDR points the
// same cases at a running envoyproxy/ratelimit (on the same files and a
// fresh Redis) instead, to check the cases themselves.
func TestEnvoyCompatibility(t *testing.T) {
	cases := readCompatCases(t, "testdata/envoy/cases.txt")
	addr, target := os.Getenv("SLUICE_ENVOY_RATELIMIT_ADDR"), "envoyproxy/ratelimit"
	if addr == "" {
		target = "sluice"
		redis := redistest.Standalone(t)
		s, err := New(Options{Config: "testdata/envoy/config", RedisURL: redis.URL(), HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Shutdown(t.Context()) })
		addr = s.Addrs().GRPC
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rl := rlspb.NewRateLimitServiceClient(conn)
	// Minute windows are in play: start in a fresh one.
	if left := 60 - time.Now().Unix()%60; left < 15 {
		time.Sleep(time.Duration(left)*time.Second + 100*time.Millisecond)
	}
	for _, c := range cases {
		if c.only != "" && c.only != target {
			continue
		}
		req := &rlspb.RateLimitRequest{Domain: c.domain, HitsAddend: c.hits}
		for i, d := range c.descs {
			var entries []*extrl.RateLimitDescriptor_Entry
			for _, e := range d {
				entries = append(entries, &extrl.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
			}
			req.Descriptors = append(req.Descriptors, &extrl.RateLimitDescriptor{Entries: entries, HitsAddend: c.dhits[i]})
		}
		for r := range c.repeat {
			resp, err := rl.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatalf("line %d, request %d: %v", c.line, r+1, err)
			}
			where := fmt.Sprintf("line %d, request %d", c.line, r+1)
			if got := resp.OverallCode.String(); got != c.overall {
				t.Errorf("%s: overall %s, want %s", where, got, c.overall)
			}
			if len(resp.Statuses) != len(c.statuses) {
				t.Fatalf("%s: %d statuses, want %d", where, len(resp.Statuses), len(c.statuses))
			}
			for i, want := range c.statuses {
				got := resp.Statuses[i]
				remaining := want.remaining
				if want.countdown {
					remaining -= int64(r) * int64(c.hits)
				}
				if got.Code.String() != want.code || int64(got.LimitRemaining) != remaining {
					t.Errorf("%s, descriptor %d: %s with %d remaining, want %s with %d", where, i, got.Code, got.LimitRemaining, want.code, remaining)
				}
				cl := got.CurrentLimit
				switch {
				case want.unit == "" && cl != nil:
					t.Errorf("%s, descriptor %d: current limit %v, want none", where, i, cl)
				case want.unit != "" && (cl == nil || cl.RequestsPerUnit != want.rate || !strings.EqualFold(cl.Unit.String(), want.unit) || cl.Name != want.name):
					t.Errorf("%s, descriptor %d: current limit %v, want %d/%s named %q", where, i, cl, want.rate, want.unit, want.name)
				case want.unit != "":
					div := unitSeconds[want.unit]
					reset := div - time.Now().Unix()%div
					if d := got.DurationUntilReset.AsDuration() - time.Duration(reset)*time.Second; d > time.Second || d < -time.Second {
						t.Errorf("%s, descriptor %d: duration_until_reset %v, want %ds within 1s", where, i, got.DurationUntilReset.AsDuration(), reset)
					}
				}
				if want.remaining == math.MaxUint32 && cl != nil {
					t.Errorf("%s, descriptor %d: unlimited with a current limit", where, i)
				}
			}
		}
	}
}

// envoy.quota_mode (QUOTA_MODE under -envoy-env) puts every descriptor in
// quota mode: a request is OVER_LIMIT only when all of its descriptors
// are, a descriptor without a limit counting as one that passed. The
// answers are envoyproxy/ratelimit f2fb157's with QUOTA_MODE=true, on the
// same requests.
func TestEnvoyGlobalQuotaMode(t *testing.T) {
	r := start(t, "envoy: {quota_mode: true}\ndomains:\n  - domain: q\n    descriptors:\n      - {key: a, rate_limit: {unit: day, requests_per_unit: 1}}\n      - {key: b, rate_limit: {unit: day, requests_per_unit: 1}}\n", "")
	rl := r.rlsClient(t)
	for _, c := range []struct {
		descs   [][2]string
		overall rlspb.RateLimitResponse_Code
		codes   []rlspb.RateLimitResponse_Code
	}{
		{[][2]string{{"a", "1"}, {"b", "1"}}, rlspb.RateLimitResponse_OK, []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK}},
		{[][2]string{{"a", "1"}, {"b", "1"}}, rlspb.RateLimitResponse_OVER_LIMIT, []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OVER_LIMIT, rlspb.RateLimitResponse_OVER_LIMIT}},
		{[][2]string{{"a", "1"}, {"b", "2"}}, rlspb.RateLimitResponse_OK, []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OVER_LIMIT, rlspb.RateLimitResponse_OK}},
		{[][2]string{{"a", "1"}, {"c", "1"}}, rlspb.RateLimitResponse_OK, []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OVER_LIMIT, rlspb.RateLimitResponse_OK}},
		{[][2]string{{"a", "1"}}, rlspb.RateLimitResponse_OVER_LIMIT, []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OVER_LIMIT}},
		{[][2]string{{"b", "2"}}, rlspb.RateLimitResponse_OVER_LIMIT, []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OVER_LIMIT}},
	} {
		req := &rlspb.RateLimitRequest{Domain: "q"}
		for _, e := range c.descs {
			req.Descriptors = append(req.Descriptors, &extrl.RateLimitDescriptor{Entries: []*extrl.RateLimitDescriptor_Entry{{Key: e[0], Value: e[1]}}})
		}
		resp, err := rl.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		var codes []rlspb.RateLimitResponse_Code
		for _, st := range resp.Statuses {
			codes = append(codes, st.Code)
		}
		if resp.OverallCode != c.overall || !slices.Equal(codes, c.codes) {
			t.Fatalf("%v: %v %v; want %v %v", c.descs, resp.OverallCode, codes, c.overall, c.codes)
		}
	}
}
