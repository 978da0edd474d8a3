// Package pgstore is a sluice.Store on PostgreSQL, through pgx.
//
// A check is one call of a PL/pgSQL function, <schema>.take, installed by
// a versioned migration (Migrate; Open runs it): one round trip. The
// function reads the database's clock, locks the rows of the check's keys
// in one order, decides with the algorithms of package algorithm
// transliterated line by line (integer microseconds in bigint, numeric
// where a product could pass 2^63), and writes the new states, so that
// concurrent checks from any number of processes are exact by
// construction. Concurrent calls of one Store are coalesced into one call
// of the function (Options.MaxInFlight).
//
// Calendar quotas (and every state, with Options.Durable) live in the
// logged table <schema>.quota; the other algorithms' states in the
// UNLOGGED table <schema>.state, which a crash of PostgreSQL empties and
// a clean restart keeps. A background sweep deletes the rows back to full.
//
// TakeTx decides inside the caller's transaction: what it takes commits or
// rolls back with the caller's work. docs/postgres.md has the setup, the
// durability choices and sizing.
package pgstore
