// Package sluice is a rate limiter: the vocabulary shared by its algorithms,
// stores, middleware and service.
//
// A Limit says how many events a key may have per period and which algorithm
// enforces it. A Store keeps per-key state and decides Requests atomically,
// answering a Decision for each. A Guard is the decision core in front of a
// Store that every front door shares: one all-or-nothing store call per
// check under a timeout, shadow requests apart, a FailMode per request
// (FailLocal, the default, decides in memory while the store fails) and a
// circuit breaker. A Limiter puts a Guard, a default Limit and a deny cache
// together behind Allow, Wait, Peek and Reset.
//
// A denial is a value (Decision.Allowed is false), never an error. Errors mean
// the input is invalid (ErrInvalidLimit, ErrEmptyKey, ErrKeyTooLong,
// ErrCostExceedsBurst) or the store failed.
//
// All algorithms work in whole microseconds, the same unit in every store, so
// the in-memory and Redis stores decide identically, bit for bit.
package sluice
