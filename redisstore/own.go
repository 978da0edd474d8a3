package redisstore

import (
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// ownConn is the store's own connection to Redis, beside the ones its
// calls share: one dedicated connection (rueidis' Dedicate), held while it
// works, which carries one thing at a time. Redis's clock is measured on
// it, and off Cluster a call with nothing else in flight goes on it
// (Store.send). A measurement opens it when there is none, and one that
// succeeds turns it on; a measurement that fails, or a call Redis did not
// answer, gives it back (rueidis closes a broken one) and turns it off.
//
// Held, not borrowed per call: a caller never waits for rueidis' pool of
// dedicated connections, which does not heed its context, and a call
// costs no more than on the shared connection.
//
// Under Sentinel a dedicated connection stays on the server it was made
// to when the client moves to a new master: rueidis closes the old
// master's shared connections, not one held outside its pool, and the
// old master may take writes for seconds more (until the sentinels demote
// it) or for good (cut off from them), writes its next resync throws
// away. So the connection remembers its master, and the store checks it
// against the client's (stale) and measures again on the new one.
type ownConn struct {
	works   atomic.Bool             // conn is open, and worked when last used
	master  atomic.Pointer[string]  // under Sentinel, the address of the master conn is to; else nil
	mu      sync.Mutex              // held by what is on conn
	conn    rueidis.DedicatedClient // guarded by mu; nil when none
	release func()                  // gives conn back; guarded by mu
}

// tryCall locks the connection for a call, unless it is off or in use.
// The caller unlocks it with called.
func (o *ownConn) tryCall() (rueidis.DedicatedClient, bool) {
	if !o.works.Load() || !o.mu.TryLock() {
		return nil, false
	}
	if o.conn == nil { // given back since works was read
		o.mu.Unlock()
		return nil, false
	}
	return o.conn, true
}

// called unlocks the connection after a call that Redis answered (err
// nil) or did not (err): then it gives the connection back, turns it off,
// and reports whether it was on.
func (o *ownConn) called(err error) (wasOn bool) {
	defer o.mu.Unlock()
	if err == nil {
		return false
	}
	o.closeLocked()
	return o.works.Swap(false)
}

// measure locks the connection for a measurement of Redis's clock,
// opening it if there is none. The caller unlocks it with measured.
func (o *ownConn) measure(client rueidis.Client) rueidis.DedicatedClient {
	o.mu.Lock()
	if o.conn != nil && o.stale(client) {
		o.closeLocked()
	}
	if o.conn == nil {
		o.dedicateLocked(client)
	}
	return o.conn
}

// dedicateLocked opens conn, and under Sentinel notes its master: the
// client's before and after Dedicate, so that a move between the two is
// not taken for either (tried again, then left to the next check, as is
// a master not known yet: "" is stale once one is).
func (o *ownConn) dedicateLocked(client rueidis.Client) {
	if client.Mode() != rueidis.ClientModeSentinel {
		o.conn, o.release = client.Dedicate()
		o.master.Store(nil)
		return
	}
	for range 3 {
		before := masterOf(client)
		o.conn, o.release = client.Dedicate()
		if after := masterOf(client); after == before {
			o.master.Store(&after)
			return
		}
		o.closeLocked()
	}
	o.conn, o.release = client.Dedicate()
	o.master.Store(new(string))
}

// stale reports whether conn is to a server that is no longer the
// client's master (Sentinel only).
func (o *ownConn) stale(client rueidis.Client) bool {
	m := o.master.Load()
	return m != nil && *m != masterOf(client)
}

// masterOf returns the address of a Sentinel client's master, or "" for
// another client.
func masterOf(client rueidis.Client) string {
	if client.Mode() != rueidis.ClientModeSentinel {
		return ""
	}
	for addr := range client.Nodes() { // the master alone
		return addr
	}
	return ""
}

// measured unlocks the connection after a measurement that ended in err:
// one that succeeded turns it on, one that failed gives it back and turns
// it off.
func (o *ownConn) measured(err error) {
	defer o.mu.Unlock()
	if err != nil {
		o.closeLocked()
	}
	o.works.Store(err == nil)
}

// close gives the connection back, for good if the store is closing.
func (o *ownConn) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closeLocked()
	o.works.Store(false)
}

func (o *ownConn) closeLocked() {
	if o.conn != nil {
		o.release()
		o.conn, o.release = nil, nil
	}
}
