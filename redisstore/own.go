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
type ownConn struct {
	works   atomic.Bool             // conn is open, and worked when last used
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
	if o.conn == nil {
		o.conn, o.release = client.Dedicate()
	}
	return o.conn
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
