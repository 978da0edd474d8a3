package httplimit

import (
	"cmp"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/door"
)

// Policy is one limit applied to the requests its Pattern matches.
type Policy struct {
	// Name identifies the policy in keys, headers, logs and metrics:
	// letters, digits, and . _ : - only. Required and unique.
	Name string
	// Pattern selects requests in net/http ServeMux syntax (Go 1.22):
	// "GET /api/items/{id}", "/admin/", "POST example.com/upload". Empty
	// matches every request.
	Pattern string
	// Limit is enforced per key. Required unless Concurrency is set; the
	// zero Limit then means no rate limit.
	Limit sluice.Limit
	// Limits, if set, chooses the policy's limits per request, in place of
	// Limit: from the request and its identity (the key without the
	// policy's name), as per-customer overrides and plans do. Nil or empty
	// keeps Limit. Every limit it returns is checked with the others, all
	// or nothing; it must be cheap and safe for concurrent use.
	Limits func(r *http.Request, identity string) []sluice.Limit
	// Concurrency, if above 0, is how many of the policy's requests one
	// key may have in flight: a request over it is answered 429 (after
	// ConcurrencyWait, if set), and one under it holds its slot until its
	// handler returns. A request passes only if every limit of every
	// policy that applies passes; a refused request holds nothing and is
	// charged nothing. The slots are kept by Options.Slots.
	Concurrency int64
	// ConcurrencyWait is how long a request waits for a slot of a full key
	// before it is refused. Default 0: refused at once.
	ConcurrencyWait time.Duration
	// Key finds the identity to limit. Required.
	Key KeyFunc
	// Cost is what one request takes. Zero means 1.
	Cost int64
	// CostFunc, if set, computes the cost per request instead (for example
	// from the size of a batch); an error is a 400.
	CostFunc func(r *http.Request) (int64, error)
	// FailMode decides requests while the store fails: FailLocal (the
	// default) decides them in memory from where the store left the key,
	// FailOpen lets them through, FailClosed answers 503 with Retry-After.
	FailMode sluice.FailMode
	// Missing decides a request whose Key finds no identity (no header, no
	// user): MissingClientIP (the default) limits it by the client's
	// address (Options.ClientIP) under the policy's limits, MissingDeny
	// answers 400, MissingSkip lets it through unlimited by this policy.
	// Each such request is logged, sampled, as the misconfiguration it
	// usually is.
	Missing sluice.MissingKey
	// Shadow decides and records, but never blocks: for trying a limit on
	// live traffic before enforcing it.
	Shadow bool
	// ChargeStatus, if set, charges a request only when its answer has one
	// of these statuses: the cost is taken at the door (so a key that has
	// used its limit is refused before the handler runs) and given back
	// for any other answer. "5 failed logins per 15 minutes" charges 401
	// and 403, so that logging in right costs nothing.
	ChargeStatus []int
	// CostFrom, if set, settles a request's cost to what its answer
	// reports (CostFromJSON, CostFromHeader, CostFromBytes): the cost
	// taken at the door (Cost or CostFunc) is the estimate, the difference
	// is taken (never refused: the work is done) or given back as soon as
	// the answer says, before the part that says it reaches the client.
	// An answer that does not say is charged by CostUnread's rule, logged
	// sampled. With CostFromJSON or CostFromBytes, the request's
	// Accept-Encoding is held to the codings the body is decoded from
	// (gzip, deflate, br, zstd) before the handler sees it.
	CostFrom CostSource
	// CostUnread is the least a request is charged whose answer's cost
	// cannot be read (CostFrom): a stream cut before its usage event, the
	// field or header missing or malformed, a body whose Content-Encoding
	// cannot be decoded. Such a request is charged the larger of
	// CostUnread and its estimate plus what its answer had shown: for
	// CostFromJSON in a text/event-stream, one per event that carried
	// data (an LLM streams about a token an event); for CostFromBytes,
	// the bytes sent. Zero, the default: that sum alone.
	CostUnread int64
	// Shape queues instead of rejecting: an allowed request waits its
	// Decision.Delay before it proceeds, so the handler behind sees at most
	// the rate (leaky bucket as a queue, nginx limit_req without nodelay);
	// a request past the queue's Burst is still a 429. Use it with
	// sluice.LeakyBucket.
	Shape bool

	pat   *pattern        // nil when Pattern is empty
	rules door.Policy     // what every front door's rules read; Conc nil without Concurrency
	limit [1]sluice.Limit // Limit, as Batch.Add takes it

	// The header values that depend only on the policy, made once. Their
	// capacity is their length, so a handler's Header.Add copies them.
	limitHdr, policyHdr []string
}

var policyName = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// prepare validates p and compiles its pattern.
func (p *Policy) prepare() error {
	if !policyName.MatchString(p.Name) {
		return fmt.Errorf("httplimit: policy name %q: want 1 to 64 letters, digits, '.', '_', ':' or '-'", p.Name)
	}
	switch {
	case p.Concurrency < 0:
		return fmt.Errorf("httplimit: policy %q: %w: %d", p.Name, sluice.ErrInvalidConcurrency, p.Concurrency)
	case p.ConcurrencyWait < 0:
		return fmt.Errorf("httplimit: policy %q: concurrency wait %v is negative", p.Name, p.ConcurrencyWait)
	case p.Concurrency > 0 && p.Limit == (sluice.Limit{}):
		// Concurrency alone.
	default:
		if err := p.Limit.Validate(); err != nil {
			return fmt.Errorf("httplimit: policy %q: %w", p.Name, err)
		}
		if p.Cost < 0 || p.Cost > p.Limit.Capacity() {
			return fmt.Errorf("httplimit: policy %q: cost %d outside 0..%d", p.Name, p.Cost, p.Limit.Capacity())
		}
	}
	if p.Key == nil {
		return fmt.Errorf("httplimit: policy %q: no Key", p.Name)
	}
	for _, code := range p.ChargeStatus {
		if code < 200 || code > 599 {
			return fmt.Errorf("httplimit: policy %q: charge status %d outside 200..599", p.Name, code)
		}
	}
	switch {
	case p.CostUnread < 0 || p.CostUnread > maxCost:
		return fmt.Errorf("httplimit: policy %q: CostUnread %d outside 0..2^53", p.Name, p.CostUnread)
	case p.CostUnread > 0 && p.CostFrom.kind == costNone:
		return fmt.Errorf("httplimit: policy %q: CostUnread without CostFrom", p.Name)
	}
	if p.charges() && !p.rated() {
		return fmt.Errorf("httplimit: policy %q: ChargeStatus and CostFrom need a rate limit", p.Name)
	}
	if p.Cost == 0 {
		p.Cost = 1
	}
	p.rules = door.Policy{Name: p.Name, Shadow: p.Shadow, FailMode: p.FailMode, Missing: p.Missing}
	p.limit[0] = p.Limit
	p.limitHdr = []string{strconv.FormatInt(cmp.Or(p.Limit.Rate, p.Concurrency), 10)}
	p.policyHdr = []string{string(appendPolicyField(nil, []*Policy{p}, []sluice.Decision{{Limit: p.Limit}}))}
	if p.Pattern == "" {
		return nil
	}
	if err := ValidatePattern(p.Pattern); err != nil {
		return fmt.Errorf("httplimit: policy %q: %w", p.Name, err)
	}
	pat := parsePattern(p.Pattern)
	p.pat = &pat
	return nil
}

// ValidatePattern reports whether pattern is a valid net/http ServeMux
// pattern, as ServeMux itself judges it.
func ValidatePattern(pattern string) (err error) {
	defer func() {
		// ServeMux.Handle panics on a malformed pattern.
		if r := recover(); r != nil {
			err = fmt.Errorf("pattern %q: %v", pattern, r)
		}
	}()
	http.NewServeMux().Handle(pattern, http.NotFoundHandler())
	return nil
}

// charges reports whether p settles its requests' cost from their answer.
func (p *Policy) charges() bool { return len(p.ChargeStatus) > 0 || p.CostFrom.kind != costNone }

// rated reports whether p has a rate limit (not only a concurrency one).
func (p *Policy) rated() bool { return p.Limit != (sluice.Limit{}) }

// matches reports whether r falls under p.
func (p *Policy) matches(r *http.Request) bool {
	return p.pat == nil || p.pat.match(r)
}
