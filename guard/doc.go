// Package guard is sluice's decision core: what stands between a caller
// and a Store that can fail. A Guard bounds each store call by a timeout,
// stops calling a store that keeps failing (a circuit breaker that probes
// it in the background), decides each request by its sluice.FailMode
// while the store fails (FailLocal from a local stand-in that starts each
// key where the store left it), and when the store is back tells it what
// the stand-in admitted meanwhile.
//
// Two ways in:
//
//   - As a sluice.Store: guard.New(store, guard.Options{Local: ...}) is a
//     Store to give sluice.NewLimiter. Limiters given the same Guard share
//     its breaker and stand-in; nothing is shared otherwise.
//   - As the front doors' core: Decide takes a Check (enforced requests
//     all-or-nothing, shadow requests apart, a FailMode each) and answers
//     a Verdict with one Outcome for metrics; Hold takes a
//     sluice.Concurrency slot through the same breaker; Health reports
//     the store's health. httplimit, grpclimit and sluice serve decide
//     through it, and a custom front door may too.
//
// Package guard imports package sluice, never the reverse: the vocabulary
// (Limit, Request, Decision, Store, FailMode) is the root's.
package guard
