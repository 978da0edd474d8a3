// Package sluice is a rate limiter: the vocabulary shared by its algorithms,
// stores, middleware and service.
//
// A Limit says how many events a key may have per period and which algorithm
// enforces it. A Store keeps per-key state and decides Requests atomically,
// answering a Decision for each. A Limiter puts a Store, a default Limit and a
// failure policy together behind Allow, Wait, Peek and Reset.
//
// A denial is a value (Decision.Allowed is false), never an error. Errors mean
// the input is invalid (ErrInvalidLimit, ErrEmptyKey, ErrKeyTooLong,
// ErrCostExceedsBurst) or the store failed.
//
// All algorithms work in whole microseconds, the same unit in every store, so
// the in-memory and Redis stores decide identically, bit for bit.
package sluice
