package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/api/sluicev1"
	"github.com/sluicehq/sluice/config"
)

// testBounds are the default bounds.
var testBounds = config.Reservations{MaxBytes: 32 << 20, MaxBytesPerPolicy: 16 << 20, MaxBytesPerKey: 1 << 20}

// What reservationSize counts is at least what open reservations hold of
// the heap, for short keys and for the longest, built as runChecks
// builds them: the bounds hold memory, not a figure beside it.
func TestReservationSize(t *testing.T) {
	policy := "tokens"
	for _, keyLen := range []int{8, 400, sluice.MaxIdentityLen} {
		for _, limits := range []int{1, 3} {
			const n = 4000
			rs := reservations{}
			keep := make([]string, 0, n) // ids, so nothing is collected early
			var counted int64
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			now := time.Now()
			bounds := config.Reservations{MaxBytes: 1 << 40, MaxBytesPerPolicy: 1 << 40, MaxBytesPerKey: 1 << 40}
			for i := range n {
				key := strings.Repeat("k", keyLen-6) + string(rune('a'+i%26)) + strings.Repeat("x", 5)
				storeKey := policy + "\x00" + key // resolve's concatenation
				size := reservationSize(storeKey, limits)
				if err := rs.hold(bounds, policy, storeKey, size, now); err != nil {
					t.Fatal(err)
				}
				r := &reservation{policy: policy, key: storeKey[len(policy)+1:], storeKey: storeKey, estimate: 1, size: size,
					limits: make([]sluice.Limit, 0, limits)}
				for range limits {
					r.limits = append(r.limits, sluice.Limit{Rate: 1, Period: time.Second})
				}
				keep = append(keep, rs.open(r, now))
				counted += size
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := int64(after.HeapAlloc) - int64(before.HeapAlloc) - int64(cap(keep))*16
			if _, b := rs.stats(); b != counted {
				t.Fatalf("the table counts %d bytes, the reservations %d", b, counted)
			}
			t.Logf("key of %d bytes, %d limits: %d bytes of heap a reservation, %d counted", keyLen, limits, heap/n, counted/n)
			if heap > counted {
				t.Errorf("key of %d bytes, %d limits: %d reservations hold %d bytes of heap, %d counted", keyLen, limits, n, heap, counted)
			}
			runtime.KeepAlive(keep)
		}
	}
}

// peakRSS resets the process's peak resident set (Linux's clear_refs 5)
// and returns the resident set now and a function that reads the peak
// since, in bytes. It skips where /proc cannot tell.
func peakRSS(t *testing.T) (int64, func() int64) {
	t.Helper()
	status := func(field string) int64 {
		data, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Skipf("no /proc/self/status: %v", err)
		}
		for line := range strings.Lines(string(data)) {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return kb << 10
			}
		}
		t.Skipf("no %s in /proc/self/status", field)
		return 0
	}
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak resident set: %v", err)
	}
	return status("VmRSS"), func() int64 { return status("VmHWM") }
}

// floodConfig bounds reservations tightly: a flood reaches the bounds
// within a test.
const floodConfig = `store:
  max_bytes: 16MiB
reservations:
  max_bytes: 8MiB
  max_bytes_per_policy: 4MiB
  max_bytes_per_key: 256KiB
policies:
  - name: tokens
    limit: sliding_log 50000/1h # exact, and nothing comes back within a test
  - name: other
    limit: sliding_log 50000/1h
`

// reserveOver reserves cost of policy's key over r's API and returns the
// reservation's id.
func (r *running) reserveOver(t *testing.T, policy, key string, cost int64) string {
	t.Helper()
	body, _ := json.Marshal(CheckRequest{Checks: []Check{{Policy: policy, Key: key, Cost: &cost, Reserve: true}}})
	code, out := r.post(t, "/v1/check", string(body))
	res, _ := out["results"].([]any)
	if code != 200 || len(res) != 1 {
		t.Fatalf("reserve %d on %s/%s: %d %v", cost, policy, key, code, out)
	}
	id, _ := res[0].(map[string]any)["reservation"].(string)
	return id
}

// remaining peeks at what policy's key has left.
func (r *running) remaining(t *testing.T, policy, key string) float64 {
	t.Helper()
	code, out := r.post(t, "/v1/check", fmt.Sprintf(`{"checks":[{"policy":%q,"key":%q,"cost":0}]}`, policy, key))
	res, _ := out["results"].([]any)
	if code != 200 || len(res) != 1 {
		t.Fatalf("peek %s/%s: %d %v", policy, key, code, out)
	}
	left, _ := res[0].(map[string]any)["remaining"].(float64)
	return left
}

// flood posts requests requests of 100 reserving checks of 1 on policy
// tokens, check c of request q on key keyOf(q, c), and returns how many
// were answered by each status.
func (r *running) flood(t *testing.T, requests int, keyOf func(q, c int) string) map[int]int {
	t.Helper()
	answers := map[int]int{}
	for q := range requests {
		var b strings.Builder
		b.WriteString(`{"checks":[`)
		for c := range 100 {
			if c > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"policy":"tokens","key":"` + keyOf(q, c) + `","cost":1,"reserve":true}`)
		}
		b.WriteString(`]}`)
		code, _ := r.post(t, "/v1/check", b.String())
		answers[code]++
	}
	return answers
}

// victimsKept cancels each of victims (policy -> reservation id, on key
// "victim", of 1000) and checks that it was still open and gave its
// estimate back.
func (r *running) victimsKept(t *testing.T, victims map[string]string) {
	t.Helper()
	for policy, id := range victims {
		before := r.remaining(t, policy, "victim")
		code, out := r.post(t, "/v1/cancel", fmt.Sprintf(`{"reservation":%q,"policy":%q,"key":"victim"}`, id, policy))
		if code != 200 {
			t.Errorf("the victim's reservation on %s after the flood: %d %v", policy, code, out)
			continue
		}
		if got := r.remaining(t, policy, "victim"); got != before+1000 {
			t.Errorf("the victim's cancel on %s gave back %v, want 1000", policy, got-before)
		}
	}
}

// One caller opens 100,000 reservations, 100 checks a request: at one
// key, then at a new key each. The bounds refuse what would pass them
// (429 at the key's, 503 at the policy's), charging nothing; the victim's
// reservations, on the same policy and on another, stay open and cancel,
// giving their estimate back; the other policy keeps its room; and
// /metrics shows the bounds, the bytes and the refusals.
func TestReservationFloodKeepsOthersReservations(t *testing.T) {
	r := start(t, floodConfig, "")
	victims := map[string]string{"tokens": r.reserveOver(t, "tokens", "victim", 1000), "other": r.reserveOver(t, "other", "victim", 1000)}
	if got := r.flood(t, 10, func(int, int) string { return "mallory" }); got[429] == 0 {
		t.Errorf("one key's flood: answers %v, want 429s at the key's bound", got)
	}
	got := r.flood(t, 1000, func(q, c int) string { return "mallory-" + strconv.Itoa(q*100+c) })
	if got[503] == 0 {
		t.Errorf("a new key each: answers %v, want 503s at the policy's bound", got)
	}
	if n, bytes := r.reserved.stats(); bytes > 4<<20 || n == 0 {
		t.Errorf("open: %d reservations of %d bytes, want some, within the policy's bound", n, bytes)
	}
	if left := r.remaining(t, "tokens", "mallory-99999"); left != 50000 {
		t.Errorf("a refused reservation's key has %v left: it was charged", left)
	}
	r.victimsKept(t, victims)
	r.reserveOver(t, "other", "newcomer", 1)
	m := r.metrics(t)
	for _, want := range []string{`sluice_reservations_max_bytes{bound="max_bytes"} 8.388608e+06`, `sluice_reservations_max_bytes{bound="max_bytes_per_key"} 262144`,
		`sluice_reservations_refused_total{bound="max_bytes_per_key"} `, `sluice_reservations_refused_total{bound="max_bytes_per_policy"} `,
		"sluice_reservations_open ", "sluice_reservations_bytes "} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// Reservations on keys of 4,000 bytes, 10,000 of them from one caller (a
// new key each): the bytes counted stay within the bounds, the process's
// resident set grows by less than 64MiB through the flood (the margin
// beside store.max_bytes, which this flood does not fill: its refused
// checks charge nothing), and the victim's reservation cancels.
func TestReservationFloodOfLongKeysStaysBounded(t *testing.T) {
	r := start(t, floodConfig, "")
	victims := map[string]string{"tokens": r.reserveOver(t, "tokens", "victim", 1000)}
	debug.FreeOSMemory() // what earlier tests left is not counted as ours
	before, peak := peakRSS(t)
	long := strings.Repeat("x", 3990)
	got := r.flood(t, 100, func(q, c int) string { return fmt.Sprintf("%06d-%s", q*100+c, long) })
	n, bytes := r.reserved.stats()
	grew := peak() - before
	t.Logf("answers %v; open: %d reservations of %d bytes; resident set %d MiB, grew by at most %d MiB", got, n, bytes, before>>20, grew>>20)
	if got[503] == 0 || bytes > 4<<20 {
		t.Errorf("answers %v, %d bytes open: want 503s at the policy's bound of 4MiB", got, bytes)
	}
	if grew > 64<<20 {
		t.Errorf("the resident set grew by %d MiB through the flood, past 64MiB", grew>>20)
	}
	r.victimsKept(t, victims)
}

// A reservation of cost 0 would hold nothing and cost nothing: it is
// refused with a 400 naming the field (INVALID_ARGUMENT over gRPC),
// and opens nothing. A reservation past the key's bound is a 429 over
// HTTP and RESOURCE_EXHAUSTED over gRPC; past the policy's, UNAVAILABLE.
func TestReservationRefusals(t *testing.T) {
	r := start(t, floodConfig, "")
	code, out := r.post(t, "/v1/check", `{"checks":[{"policy":"tokens","key":"a","cost":1},{"policy":"tokens","key":"a","cost":0,"reserve":true}]}`)
	if detail, _ := out["detail"].(string); code != 400 || !strings.HasPrefix(detail, "checks[1].cost: a reservation's estimate must be at least 1") {
		t.Fatalf("a reservation of 0: %d %v", code, out)
	}
	if n, b := r.reserved.stats(); n != 0 || b != 0 {
		t.Fatalf("a refused request left %d reservations of %d bytes", n, b)
	}
	if left := r.remaining(t, "tokens", "a"); left != 50000 {
		t.Fatalf("a refused request charged its other check: %v left", left)
	}
	conn, err := grpc.NewClient(r.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cs := sluicev1.NewCheckServiceClient(conn)
	reserve := func(key string, cost int64) error {
		_, err := cs.Check(context.Background(), &sluicev1.CheckRequest{Checks: []*sluicev1.Check{{Policy: "tokens", Key: key, Cost: &cost, Reserve: true}}})
		return err
	}
	if err := reserve("a", 0); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a reservation of 0 over gRPC: %v", err)
	}
	long := strings.Repeat("k", 4000)
	var err429 error
	for err429 == nil {
		err429 = reserve(long, 1)
	}
	if status.Code(err429) != codes.ResourceExhausted || !strings.Contains(err429.Error(), "reservations.max_bytes_per_key") {
		t.Fatalf("past the key's bound over gRPC: %v", err429)
	}
	var err503 error
	for i := 0; err503 == nil; i++ {
		err503 = reserve(fmt.Sprint(i, long), 1)
	}
	if status.Code(err503) != codes.Unavailable || !strings.Contains(err503.Error(), "reservations.max_bytes_per_policy") {
		t.Fatalf("past the policy's bound over gRPC: %v", err503)
	}
	code, out = r.post(t, "/v1/check", fmt.Sprintf(`{"checks":[{"policy":"tokens","key":%q,"cost":1,"reserve":true}]}`, long))
	if detail, _ := out["detail"].(string); code != 429 || !strings.Contains(detail, "checks[0]: this key's open reservations would pass reservations.max_bytes_per_key (262144 bytes)") {
		t.Fatalf("past the key's bound over HTTP: %d %v", code, out)
	}
}
