// Package sluice is a rate limiter: the vocabulary shared by its algorithms,
// stores, middleware and service, and the Limiter that applies it.
//
// A Limit says how many events a key may have per period and which algorithm
// enforces it. A Store keeps per-key state and decides Requests atomically,
// answering a Decision for each. A Limiter applies a Limit through a Store
// (Allow, Wait, Reserve, Peek, Reset); a Concurrency limits the requests in
// flight per key. Package guard puts a timeout, a circuit breaker and a local
// stand-in in front of a remote Store.
//
// A denial is a value (Decision.Allowed is false), never an error. Errors mean
// the input is invalid (ErrInvalidLimit, ErrEmptyKey, ...) or the store failed.
// All algorithms work in whole microseconds, in every store, so the memory and
// Redis stores decide identically, bit for bit.
package sluice
