// Package redisstore is sluice's Redis Store: every algorithm atomic in one
// Lua script, on the server's clock, against standalone Redis, Sentinel or
// Redis Cluster (and Valkey).
//
// Each Take or TakeAll is one script call: the whole batch is loaded,
// decided and written inside Redis, all-or-nothing, exactly as the memory
// store decides it (scripts/*.lua are line-by-line twins of package
// algorithm, in integer microseconds). The script runs by SHA, falling back
// to EVAL when Redis answers NOSCRIPT after a restart or failover. Time comes
// from Redis TIME unless the Request carries Now, so app servers' clocks
// cannot skew decisions. Every key written gets a TTL one second longer than
// its state's life.
//
// Keys are <prefix>{<user key>}:<algorithm>:<period µs>. The user key is
// escaped (\ → \\, { → \(, } → \)) so it is always the whole hash tag: every
// key of one user key shares a Cluster slot, and no user key can move its
// slot or collide with another's. A batch whose keys span slots on Cluster
// is refused with ErrCrossSlot before anything is sent.
//
// The client is github.com/redis/rueidis, which pipelines concurrent calls
// onto shared connections automatically.
package redisstore
