// Package sluice is a rate limiter: the vocabulary shared by its algorithms,
// stores, middleware and service, and the Limiter that applies it.
//
// A Limit says how many events a key may have per period and which algorithm
// enforces it. A Store keeps per-key state and decides Requests atomically,
// answering a Decision for each. A Limiter puts a Store, a default Limit, a
// FailMode for store errors and a deny cache together behind Allow, Wait,
// Reserve, Peek and Reset; a Concurrency limits the requests in flight per
// key.
//
// The decision core in front of a remote store (per-call timeout, circuit
// breaker, a local stand-in while the store fails, the replay of what it
// admitted when the store is back) is package guard: guard.New wraps a
// Store in one, which is itself a Store to give a Limiter.
//
// A denial is a value (Decision.Allowed is false), never an error. Errors mean
// the input is invalid (ErrInvalidLimit, ErrEmptyKey, ErrKeyTooLong,
// ErrCostExceedsBurst) or the store failed.
//
// All algorithms work in whole microseconds, the same unit in every store, so
// the in-memory and Redis stores decide identically, bit for bit.
package sluice
