package algorithm

import (
	"slices"

	"github.com/sluicehq/sluice"
)

// Row is one algorithm: its code and name, whether it takes a burst, what
// its State words hold, and its functions. Every per-algorithm dispatch of
// this package (Status, Admit, Admitted, Denied, Apply, Refund, FullAt,
// Words) is a lookup in its Row; a test proves that the root package's
// names, the Redis store's Lua scripts, the PostgreSQL store's SQL, the
// policy file's JSON schema, the shard wire, the simulator and
// docs/algorithms.md list the same algorithms.
type Row struct {
	// Algorithm is its code: the number the Lua scripts, the SQL functions
	// and the shard wire carry.
	Algorithm sluice.Algorithm
	// Name is its configuration name, Algorithm.String().
	Name string
	// Burst reports whether it takes a Burst (Algorithm.HasBurst).
	Burst bool
	// State says what State's A, B and C hold, "" for a word it does not
	// use; all "" for SlidingLog, which keeps a log of LogEntry instead.
	State [3]string

	status func(s State, p *Params, now, cost int64) (State, Result)
	admit  func(s State, p *Params, now, cost int64) (State, bool)
	// report is Admitted's: the Result of an admission from s to next.
	report func(s, next State, p *Params, now int64) (remaining, resetAfter, delay int64)
	// denied is Denied's; nil where Status reports a denial.
	denied func(s, next State, p *Params, now int64) (remaining, retryAfter, resetAfter int64)
	// record is Apply's: cost recorded on s, rolled and refilled to now.
	record func(s State, p *Params, cost int64) State
	refund func(s State, p *Params, now, taken, cost int64) State
	fullAt func(s State, p *Params) int64
}

// table is every algorithm, indexed by its code.
var table = [...]Row{
	sluice.FixedWindow: {
		Algorithm: sluice.FixedWindow, Name: "fixed_window",
		State:  [3]string{"window start", "count", ""},
		status: FixedWindow, admit: fixedAdmit, report: fixedAdmitted,
		record: windowRecord, refund: fixedRefund, fullAt: fixedFullAt,
	},
	sluice.SlidingLog: {
		Algorithm: sluice.SlidingLog, Name: "sliding_log",
	},
	sluice.SlidingWindow: {
		Algorithm: sluice.SlidingWindow, Name: "sliding_window",
		State:  [3]string{"window start", "count", "previous window's count"},
		status: SlidingWindow, admit: slidingAdmit, report: slidingAdmitted,
		record: windowRecord, refund: slidingRefund, fullAt: slidingFullAt,
	},
	sluice.TokenBucket: {
		Algorithm: sluice.TokenBucket, Name: "token_bucket", Burst: true,
		State:  [3]string{"deficit", "last refill", "carry"},
		status: TokenBucket, admit: tokenAdmit, report: tokenAdmitted,
		record: tokenRecord, refund: tokenBucketRefund, fullAt: tokenFullAt,
	},
	sluice.LeakyBucket: {
		Algorithm: sluice.LeakyBucket, Name: "leaky_bucket", Burst: true,
		State:  [3]string{"drain time (µs)", "its remainder (1/Rate µs)", "the rate they are kept at"},
		status: LeakyBucket, admit: gcraAdmit, report: leakyAdmitted, denied: gcraDenied,
		record: gcraRecord, refund: gcraRefund, fullAt: gcraFullAt,
	},
	sluice.GCRA: {
		Algorithm: sluice.GCRA, Name: "gcra", Burst: true,
		State:  [3]string{"TAT (µs)", "its remainder (1/Rate µs)", "the rate they are kept at"},
		status: GCRA, admit: gcraAdmit, report: gcraAdmitted, denied: gcraDenied,
		record: gcraRecord, refund: gcraRefund, fullAt: gcraFullAt,
	},
	sluice.Calendar: {
		Algorithm: sluice.Calendar, Name: "calendar",
		State:  [3]string{"window start", "count", "window end"},
		status: Calendar, admit: calendarAdmit, report: calendarAdmitted,
		record: windowRecord, refund: calendarRefund, fullAt: calendarFullAt,
	},
}

// Rows returns every algorithm's Row, in the order of their codes.
func Rows() []Row { return slices.Clone(table[1:]) }

// lookup returns a's Row, or nil for a code no algorithm has.
func lookup(a sluice.Algorithm) *Row {
	if a = a.Resolved(); int(a) < len(table) && table[a].Name != "" {
		return &table[a]
	}
	return nil
}

// windowRecord counts cost in the current window (B): the fixed and
// sliding windows' and Calendar's Apply.
func windowRecord(s State, _ *Params, cost int64) State {
	s.B += cost
	return s
}
