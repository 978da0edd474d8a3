package storetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// Epoch is time 0 of every scenario: 2023-11-15 00:00 UTC, aligned to a
// day, so epoch-aligned windows start at offsets that are multiples of
// their period.
var Epoch = time.Unix(1_700_006_400, 0)

// A scenario file holds blocks that start with "scenario NAME". Inside one:
//
//	limit NAME [algorithm] rate/period [burst n]
//	AT KEY LIMIT COST => EXPECT
//	AT batch KEY LIMIT COST, KEY LIMIT COST => EXPECT | EXPECT
//
// AT is an offset from Epoch ("0", "250ms", "1.5s") or an RFC 3339 time
// ("2024-02-29T23:59:59Z"); KEY may be quoted Go
// style ("\x00k"); a COST ending in "!" is forced (Request.Force), and
// one written -COST@TAKEN gives COST back as taken at the time TAKEN (an
// offset as AT: Request.Refund). EXPECT is "allow" or "deny" followed by rem=N retry=D
// reset=D and optionally delay=D (default 0), or "error NAME" with NAME one
// of cost_exceeds_burst, empty_key, key_too_long, negative_cost,
// invalid_limit. Blank lines and lines starting with # are ignored.
type scenario struct {
	file, name string
	line       int
	steps      []step
}

type step struct {
	line   int
	at     time.Duration
	reqs   []sluice.Request
	expect []expect
	err    error
}

type expect struct {
	allowed             bool
	remaining           int64
	retry, reset, delay time.Duration
}

var errorNames = map[string]error{
	"cost_exceeds_burst": sluice.ErrCostExceedsBurst,
	"empty_key":          sluice.ErrEmptyKey,
	"key_too_long":       sluice.ErrKeyTooLong,
	"negative_cost":      sluice.ErrNegativeCost,
	"invalid_limit":      sluice.ErrInvalidLimit,
	"duplicate_request":  sluice.ErrDuplicateRequest,
}

// RunScenarios replays every scenario of testdata/*.txt on a fresh store.
func RunScenarios(t *testing.T, newStore NewStore) {
	scenarios, err := loadScenarios()
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scenarios {
		t.Run(strings.TrimSuffix(sc.file, ".txt")+"/"+sc.name, func(t *testing.T) {
			store := newStore(t)
			for _, st := range sc.steps {
				runStep(t, store, sc, st)
			}
		})
	}
}

func runStep(t *testing.T, store sluice.Store, sc scenario, st step) {
	t.Helper()
	ctx := context.Background()
	got := make([]sluice.Decision, len(st.reqs))
	var err error
	if len(st.reqs) == 1 {
		got[0], err = store.Take(ctx, st.reqs[0])
	} else {
		err = store.TakeAll(ctx, st.reqs, got)
	}
	where := fmt.Sprintf("%s:%d", sc.file, st.line)
	if st.err != nil {
		if !errors.Is(err, st.err) {
			t.Fatalf("%s: error = %v, want %v", where, err, st.err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: unexpected error: %v", where, err)
	}
	for i, want := range st.expect {
		g := got[i]
		have := expect{g.Allowed, g.Remaining, g.RetryAfter, g.ResetAfter, g.Delay}
		if have != want {
			t.Errorf("%s: request %d: got %s, want %s", where, i, have, want)
		}
		if g.Limit != st.reqs[i].Limit {
			t.Errorf("%s: request %d: decision reports limit %v, want %v", where, i, g.Limit, st.reqs[i].Limit)
		}
	}
}

func (e expect) String() string {
	verb := "deny"
	if e.allowed {
		verb = "allow"
	}
	return fmt.Sprintf("%s rem=%d retry=%v reset=%v delay=%v", verb, e.remaining, e.retry, e.reset, e.delay)
}

func loadScenarios() ([]scenario, error) {
	files, err := fs.Glob(scenarioFiles, "testdata/*.txt")
	if err != nil {
		return nil, err
	}
	var all []scenario
	for _, f := range files {
		data, err := scenarioFiles.ReadFile(f)
		if err != nil {
			return nil, err
		}
		scs, err := parseScenarios(path.Base(f), string(data))
		if err != nil {
			return nil, err
		}
		all = append(all, scs...)
	}
	return all, nil
}

func parseScenarios(file, text string) ([]scenario, error) {
	var (
		out    []scenario
		limits map[string]sluice.Limit
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", file, n, fmt.Sprintf(format, args...))
		}
		if name, ok := strings.CutPrefix(line, "scenario "); ok {
			out = append(out, scenario{file: file, name: strings.ReplaceAll(strings.TrimSpace(name), " ", "_"), line: n})
			limits = map[string]sluice.Limit{}
			continue
		}
		if len(out) == 0 {
			return nil, fail("step before the first scenario line")
		}
		if rest, ok := strings.CutPrefix(line, "limit "); ok {
			name, spec, _ := strings.Cut(rest, " ")
			l, err := sluice.ParseLimit(spec)
			if err != nil {
				return nil, fail("%v", err)
			}
			limits[name] = l
			continue
		}
		st, err := parseStep(line, limits)
		if err != nil {
			return nil, fail("%v", err)
		}
		st.line = n
		cur := &out[len(out)-1]
		cur.steps = append(cur.steps, st)
	}
	return out, sc.Err()
}

func parseStep(line string, limits map[string]sluice.Limit) (step, error) {
	var st step
	lhs, rhs, ok := strings.Cut(line, "=>")
	if !ok {
		return st, errors.New("missing =>")
	}
	at, rest, _ := strings.Cut(strings.TrimSpace(lhs), " ")
	var err error
	if st.at, err = parseOffset(at); err != nil {
		return st, err
	}
	batch := false
	if r, ok := strings.CutPrefix(strings.TrimSpace(rest), "batch "); ok {
		rest, batch = r, true
	}
	for _, part := range strings.Split(rest, ",") {
		req, err := parseRequest(strings.TrimSpace(part), limits)
		if err != nil {
			return st, err
		}
		req.Now = Epoch.Add(st.at)
		st.reqs = append(st.reqs, req)
	}
	if !batch && len(st.reqs) != 1 {
		return st, errors.New("several requests without \"batch\"")
	}
	rhs = strings.TrimSpace(rhs)
	if name, ok := strings.CutPrefix(rhs, "error "); ok {
		if st.err = errorNames[strings.TrimSpace(name)]; st.err == nil {
			return st, fmt.Errorf("unknown error name %q", name)
		}
		return st, nil
	}
	for _, part := range strings.Split(rhs, "|") {
		e, err := parseExpect(strings.TrimSpace(part))
		if err != nil {
			return st, err
		}
		st.expect = append(st.expect, e)
	}
	if len(st.expect) != len(st.reqs) {
		return st, fmt.Errorf("%d expectations for %d requests", len(st.expect), len(st.reqs))
	}
	return st, nil
}

func parseRequest(s string, limits map[string]sluice.Limit) (sluice.Request, error) {
	var req sluice.Request
	f := strings.Fields(s)
	if len(f) != 3 {
		return req, fmt.Errorf("request %q: want KEY LIMIT COST", s)
	}
	key := f[0]
	if strings.HasPrefix(key, `"`) {
		k, err := strconv.Unquote(key)
		if err != nil {
			return req, fmt.Errorf("key %s: %v", key, err)
		}
		key = k
	}
	if key == "-" {
		key = ""
	}
	if n, ok := strings.CutPrefix(key, "long:"); ok {
		size, err := strconv.Atoi(n)
		if err != nil {
			return req, fmt.Errorf("key %s: %v", key, err)
		}
		key = strings.Repeat("k", size)
	}
	l, ok := limits[f[1]]
	if !ok {
		return req, fmt.Errorf("unknown limit %q", f[1])
	}
	costText, force := strings.CutSuffix(f[2], "!")
	var refund time.Time
	if n, at, ok := strings.Cut(costText, "@"); ok {
		n, ok = strings.CutPrefix(n, "-")
		if !ok {
			return req, fmt.Errorf("cost %q: a refund is -COST@TAKEN", f[2])
		}
		taken, err := parseOffset(at)
		if err != nil {
			return req, fmt.Errorf("cost %q: %v", f[2], err)
		}
		costText, refund = n, Epoch.Add(taken)
	}
	cost, err := strconv.ParseInt(costText, 10, 64)
	if err != nil {
		return req, fmt.Errorf("cost %q: %v", f[2], err)
	}
	return sluice.Request{Key: key, Limit: l, Cost: cost, Force: force, Refund: refund}, nil
}

func parseExpect(s string) (expect, error) {
	var e expect
	f := strings.Fields(s)
	if len(f) < 4 {
		return e, fmt.Errorf("expectation %q: want allow|deny rem=N retry=D reset=D [delay=D]", s)
	}
	switch f[0] {
	case "allow":
		e.allowed = true
	case "deny":
	default:
		return e, fmt.Errorf("expectation %q: want allow or deny", s)
	}
	seen := map[string]bool{}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "rem":
			e.remaining, err = strconv.ParseInt(v, 10, 64)
		case "retry":
			e.retry, err = parseOffset(v)
		case "reset":
			e.reset, err = parseOffset(v)
		case "delay":
			e.delay, err = parseOffset(v)
		default:
			err = fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return e, fmt.Errorf("expectation %q: %v", s, err)
		}
		seen[k] = true
	}
	if !seen["rem"] || !seen["retry"] || !seen["reset"] {
		return e, fmt.Errorf("expectation %q: rem, retry and reset are required", s)
	}
	return e, nil
}

func parseOffset(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.Sub(Epoch), nil
	}
	return time.ParseDuration(s)
}
