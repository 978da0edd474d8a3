// Package redisstore is sluice's Redis Store: every algorithm atomic in one
// Lua script, on the server's clock, against standalone Redis, Sentinel or
// Redis Cluster (and Valkey).
//
// Each Take or TakeAll is one call of one Lua function: the whole batch is
// loaded, decided and written inside Redis, all-or-nothing, exactly as the
// memory store decides it (scripts/*.lua are line-by-line twins of package
// algorithm, in integer microseconds). On Redis 7 and later the code is a
// Redis Functions library, loaded on first use and again whenever a call
// finds it missing (a restart, a failover, a FUNCTION FLUSH), and called by
// FCALL: its definitions then run once per server, not once per call.
// Where functions are unavailable (Redis 6, or an ACL that forbids FUNCTION
// LOAD) the same code runs as a script by EVALSHA, falling back to EVAL
// when Redis answers NOSCRIPT. Time comes
// from Redis TIME unless the Request carries Now, so app servers' clocks
// cannot skew decisions. Every key written gets a TTL one second longer than
// its state's life.
//
// Keys are <prefix>{<user key>}:<algorithm>:<period µs>. The user key is
// escaped (\ → \\, { → \(, } → \)) so it is always the whole hash tag: every
// key of one user key shares a Cluster slot, and no user key can move its
// slot or collide with another's. A batch whose keys span slots on Cluster
// is peeked in every slot, then taken slot by slot, the slots that would
// deny first (TakeAll).
//
// The client is github.com/redis/rueidis, which pipelines concurrent calls
// onto shared connections automatically.
package redisstore
