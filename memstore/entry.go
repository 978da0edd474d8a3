package memstore

import (
	"math"
	"math/bits"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/algorithm"
)

// entry is one key's state in a table of an O(1) algorithm. Its key never
// changes; its state is guarded by its own lock, so a Take on an existing
// key locks that key alone: Takes on other keys of the shard, and sweeping,
// do not wait for it. The GCRA and the leaky bucket skip even that lock
// when their state is one word, and when it is two where the processor
// swaps two words at once (cas128; see Store.Take).
//
// An entry is 64 bytes whatever its algorithm, a key of up to 16 bytes
// included: with its index slot, such a key costs about 80 bytes, and a
// lookup that finds it reads one object. A longer key is a second object.
// Its expiry is not stored: it is derived from the state (algorithm.FullAt).
type entry struct {
	key string // in short when it fits
	// a is the state's first word, A, which no algorithm makes negative:
	// alone when B is 0, with B packed in (packedB) when both fit, or with
	// hasB set and B in b; or a mark. Guarded by mu; in tables that swap
	// (swaps), read and swapped atomically, and busyMark while locked.
	a int64
	// b is B when a has hasB, else the unit a counts B in (see unit).
	// Guarded by the lock; in tables that swap, also swapped with a in
	// one instruction where the processor has one (cas128), so a and b
	// are adjacent at an offset that is a multiple of 16.
	b int64
	// c is C. Guarded by the lock; also read atomically in tables that
	// swap.
	c     int64
	mu    sync.Mutex // the lock, in tables that do not swap
	short [16]byte
}

// Marks and flags in entry.a.
const (
	deadMark = math.MinInt64     // removed from its table: look the key up again
	busyMark = math.MinInt64 + 1 // locked in a table that swaps: the words are being decided
	hasB     = 1 << 62           // B is not 0 and is in entry.b (A is below 2^62)
	packedB  = 1 << 61           // B is in the word too, in units: bits 51 to 60, A from wordEpoch in bits 0 to 50
	aBits    = 51
	bBits    = 10
	// wordEpoch is 2020-01-01 in µs: a packed A is held from it, which
	// leaves 2^51 µs, until 2091.
	wordEpoch = 1_577_836_800_000_000
)

// unit is what a packed B counts in. A GCRA or leaky-bucket TAT is whole
// µs plus a remainder over the Rate; it starts at a whole µs (now) and
// moves by multiples of Period/Rate, so its remainder is a multiple of
// gcd(Rate, Period), and it takes Rate/gcd values: 1,000 for 10^9/1s
// (whose emission interval is 1/1000 µs), 3 for 3/s. Counted in that
// unit, B packs beside A whenever Rate/gcd is at most 2^bBits, however
// high the Rate. A remainder that is not a multiple (after the limit's
// rate changed) is kept beside. The other algorithms count in ones.
//
// While the first word is not hasB (nor a mark), entry.b holds its unit:
// the one of the rate in entry.c and the table's period (unitOf), so
// that Take's compare-and-swap, which knows the unit of its limit, never
// reads b.
type unit struct {
	d     int64  // the unit: gcd(Rate, Period), or 1
	shift uint8  // trailing zeros of d
	inv   uint64 // the inverse of d>>shift mod 2^64
}

// one is the unit of the algorithms other than the GCRA and the leaky
// bucket, and of a state kept at no rate.
var one = unit{d: 1, inv: 1}

// unitOf returns the unit of a GCRA remainder over rate in a period of
// period µs, both positive (or rate 0: one).
func unitOf(rate, period int64) unit {
	if rate <= 0 || period <= 0 {
		return one
	}
	d := int64(gcd(uint64(rate), uint64(period)))
	u := unit{d: d, shift: uint8(bits.TrailingZeros64(uint64(d)))}
	odd := uint64(d) >> u.shift
	// Newton's iteration doubles the bits of an inverse mod 2^64 that
	// are right; odd is its own inverse mod 8 (3 bits).
	u.inv = odd
	for range 5 {
		u.inv *= 2 - odd*u.inv
	}
	return u
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// count returns b in units when it is a multiple of u below 2^bBits. With
// d = 2^shift × odd, a multiple of d shifts to a multiple of odd, and
// times the inverse of odd mod 2^64 it is its quotient; any other b gives
// a q whose q×d is not b.
func (u unit) count(b int64) (int64, bool) {
	q := (uint64(b) >> u.shift) * u.inv
	return int64(q), q < 1<<bBits && int64(q)*u.d == b
}

// word returns state s as one word, when it is one: B is 0, or a multiple
// of u under 2^bBits units with A in the 2^aBits µs from wordEpoch. A
// past 2^61 − 1 (a debt of forced costs beyond any horizon: a TAT 73,000
// years ahead) is kept at 2^61 − 1, which denies as surely.
func word(s algorithm.State, u unit) (int64, bool) {
	if s.B == 0 {
		return min(s.A, packedB-1), true
	}
	if q, ok := u.count(s.B); ok && uint64(s.A-wordEpoch) < 1<<aBits {
		return packedB | q<<aBits | (s.A - wordEpoch), true
	}
	return 0, false
}

// pack returns the words a and b of state s counted in u: one word and
// the unit, or A with hasB and B.
func pack(s algorithm.State, u unit) (a, b int64) {
	if w, ok := word(s, u); ok {
		return w, u.d
	}
	return min(s.A, hasB-1) | hasB, s.B
}

// stateOf returns the state a word a (not a mark) holds, with b and c the
// entry's other words.
func stateOf(a, b, c int64) algorithm.State {
	switch {
	case a&hasB != 0:
		return algorithm.State{A: a &^ hasB, B: b, C: c}
	case a&packedB != 0:
		return algorithm.State{A: a&(1<<aBits-1) + wordEpoch, B: (a >> aBits & (1<<bBits - 1)) * b, C: c}
	}
	return algorithm.State{A: a, C: c}
}

// newEntry returns a new entry for a copy of key (stores never retain the
// caller's buffer) holding state st, counted in u (see unit). It is
// published by its index slot.
func newEntry(key string, st algorithm.State, u unit) *entry {
	e := &entry{c: st.C}
	e.a, e.b = pack(st, u)
	if len(key) <= len(e.short) {
		n := copy(e.short[:], key)
		e.key = unsafe.String(&e.short[0], n)
	} else {
		e.key = strings.Clone(key)
	}
	return e
}

// lock locks e and returns its state; ok is false when e is dead. swaps
// says whether e's table also swaps a without the lock. In such a table
// the lock is the word itself: locking swaps busyMark in, so that a swap
// without the lock fails meanwhile, and unlocking stores the new state.
// The section it guards is a few dozen instructions, so a locker spins,
// yielding its processor after a few tries, instead of sleeping on a
// mutex: under contention a sleep and a wake-up cost more than the wait.
func (e *entry) lock(swaps bool) (algorithm.State, bool) {
	if !swaps {
		e.mu.Lock()
		return e.locked()
	}
	for tries := 0; ; tries++ {
		if s, ok, done := e.trySwap(); done {
			return s, ok
		}
		if tries >= 16 {
			runtime.Gosched()
		}
	}
}

// tryLock locks e if no one holds it now. Sweeping uses it: an entry in
// use is not a candidate for removal, and a batch may hold it.
func (e *entry) tryLock(swaps bool) (s algorithm.State, ok bool) {
	if !swaps {
		if !e.mu.TryLock() {
			return s, false
		}
		return e.locked()
	}
	s, ok, _ = e.trySwap()
	return s, ok
}

// trySwap locks e of a table that swaps, unless it is held: done reports
// whether it got an answer, ok whether e is live (and now locked).
func (e *entry) trySwap() (s algorithm.State, ok, done bool) {
	switch a := atomic.LoadInt64(&e.a); a {
	case deadMark:
		return s, false, true
	case busyMark:
		return s, false, false
	default:
		if atomic.CompareAndSwapInt64(&e.a, a, busyMark) {
			return stateOf(a, e.b, e.c), true, true
		}
		return s, false, false
	}
}

// locked returns the state of e, of a table that does not swap, whose
// mutex the caller holds.
func (e *entry) locked() (algorithm.State, bool) {
	if e.a == deadMark {
		e.mu.Unlock()
		return algorithm.State{}, false
	}
	return stateOf(e.a, e.b, e.c), true
}

// unlock stores s, changed or not, counted in u (see unit), into the
// locked e and unlocks it.
func (e *entry) unlock(s algorithm.State, swaps bool, u unit) {
	a, b := pack(s, u)
	e.b = b
	if swaps {
		if e.c != s.C { // only the lock's holder writes c: read plainly
			atomic.StoreInt64(&e.c, s.C) // the rate, read without the lock too
		}
		atomic.StoreInt64(&e.a, a) // unlocks
		return
	}
	e.c = s.C
	e.a = a
	e.mu.Unlock()
}

// kill marks the locked e removed and unlocks it: no one locks it again.
func (e *entry) kill(swaps bool) {
	if swaps {
		atomic.StoreInt64(&e.a, deadMark)
		return
	}
	e.a = deadMark
	e.mu.Unlock()
}

// index is a table's open-addressing hash index (linear probing) of its
// entries. Readers probe it without a lock. Writers hold the shard lock:
// they fill empty or tombstone slots, turn removed entries' slots into
// tombstones, and resize by publishing a new index; a reader still on the
// old one finds each entry it holds, live or dead, or misses a key added
// since, and then looks again under the shard lock.
//
// Beside each slot a byte, its tag, says whether it is empty, a tombstone,
// or which of 254 classes of hash its key is in: a probe reads the entries
// whose tag matches, about one a lookup, where comparing each key on the
// way would read one entry per slot probed (1.5 at half full, 2.5 at three
// quarters), each a cache miss in a large store. Seven slots and their
// tags share a cache line (a group), so a lookup in a large store reads
// two lines: its group's and its entry's. A reader that sees a tag not yet
// updated misses at worst, and looks again under the lock.
type index struct {
	groups []group
	n      uint64 // slots: groupSlots per group, a power of two groups
	used   int    // slots not empty (entries and tombstones); guarded by the shard lock
	live   int    // entries; guarded by the shard lock
}

// group is seven slots and their tags: 64 bytes, one cache line (the
// allocator aligns a power of two of them).
type group struct {
	tags  atomic.Uint64 // byte j is slot j's tag; the eighth is unused
	slots [groupSlots]atomic.Pointer[entry]
}

const groupSlots = 7

// tombstone fills the slot of a removed entry, so that probes go past it.
var tombstone = new(entry)

// The tags of an empty slot and of a tombstone; an entry's is tagOf its
// key's hash.
const (
	tagEmpty = 0
	tagGone  = 1
)

// tagOf returns the tag of a key of hash h: 2 to 255, from bits the shard
// and the slot are not chosen by.
func tagOf(h uint64) uint64 { return max(h>>24&0xff, 2) }

const minIndex = 8

// newIndex returns an index of at least size slots.
func newIndex(size int) *index {
	g := 1
	for g*groupSlots < size {
		g <<= 1
	}
	return &index{groups: make([]group, g), n: uint64(g * groupSlots)}
}

// slot returns slot i.
func (ix *index) slot(i uint64) *atomic.Pointer[entry] {
	return &ix.groups[i/groupSlots].slots[i%groupSlots]
}

// home returns the group and the slot in it that a probe for hash h
// starts at. The shard is chosen by the low bits of h and the tag by bits
// 24 to 31; the group is chosen by the high 32 bits, scaled to the
// index's size, and the slot by bits 16 to 23.
func (ix *index) home(h uint64) (g, j uint64) {
	return (h >> 32) * uint64(len(ix.groups)) >> 32, (h >> 16 & 0xff) * groupSlots >> 8
}

// Bytes of a group's tag word, eight at a time: lows holds 1 in each
// byte, and slotHighs the high bit of each of the seven slots' tags.
const (
	lows      = 0x0101010101010101
	slotHighs = 0x0080808080808080
)

// zeros returns the high bit of each byte of x that is zero, and no other
// bit: a byte's low seven bits plus 0x7f carry into its high bit unless
// they are all zero, and no byte carries into the next.
func zeros(x uint64) uint64 {
	const lows7 = 0x7f7f7f7f7f7f7f7f
	return ^((x&lows7 + lows7) | x | lows7)
}

// find returns the entry of key, of hash h, or nil; readers call it
// without a lock. It compares a group's seven tags at once and reads only
// the entries whose tag is the key's, in the groups from the key's home up
// to the first that holds an empty slot after the probe's start: a key is
// never past an empty slot on its probe sequence (remove empties a slot
// only when no probe needs to pass it), and an entry whose key is the key
// is its entry wherever it is found. A lookup that finds its key in its
// first group takes no branch that depends on where in the group the key
// is, which in a large store the processor could not predict. At most 3/4
// of the slots are ever used, so the probe ends.
func (ix *index) find(h uint64, key string) *entry {
	want := tagOf(h) * lows
	g, j := ix.home(h)
	last := uint64(len(ix.groups) - 1) // a power of two (newIndex): g&last wraps
	from := uint64(slotHighs) << (j * 8) & slotHighs
	for {
		grp := &ix.groups[g&last]
		w := grp.tags.Load()
		for m := zeros(w^want) & from; m != 0; m &= m - 1 {
			if e := grp.slots[bits.TrailingZeros64(m)>>3].Load(); e != nil && e != tombstone && e.key == key {
				return e
			}
		}
		if zeros(w)&from != 0 {
			return nil
		}
		g, from = g+1, slotHighs
	}
}

// locate returns the entry and slot of key, of hash h, or nil and the
// first free slot (a tombstone or empty) on its probe sequence, the one
// find follows. The caller holds the shard lock.
func (ix *index) locate(h uint64, key string) (*entry, uint64) {
	free := ^uint64(0)
	want := tagOf(h)
	g, j := ix.home(h)
	i := g*groupSlots + j
	grp := &ix.groups[g]
	w := grp.tags.Load()
	for {
		switch w >> (j * 8) & 0xff {
		case tagEmpty:
			if free == ^uint64(0) {
				free = i
			}
			return nil, free
		case tagGone:
			if free == ^uint64(0) {
				free = i
			}
		case want:
			if e := grp.slots[j].Load(); e != nil && e != tombstone && e.key == key {
				return e, i
			}
		}
		if i, j = i+1, j+1; j == groupSlots {
			if i == ix.n {
				i = 0
			}
			grp, j = &ix.groups[i/groupSlots], 0
			w = grp.tags.Load()
		}
	}
}

// set puts e, of hash h, in slot i. The caller holds the shard lock.
func (ix *index) set(i uint64, e *entry, h uint64) { ix.put(i, e, tagOf(h)) }

// remove takes the entry out of slot i. The caller holds the shard lock. A
// probe ends at an empty slot, so when the next slot is empty no probe
// needs to pass slot i: it becomes empty, and so do the tombstones before
// it in turn, which keeps tombstones from filling the index between
// rebuilds. Otherwise it becomes a tombstone.
func (ix *index) remove(i uint64) {
	if ix.tag(ix.after(i)) != tagEmpty {
		ix.put(i, tombstone, tagGone)
		return
	}
	for {
		ix.put(i, nil, tagEmpty)
		ix.used--
		if i = ix.before(i); ix.tag(i) != tagGone {
			return
		}
	}
}

// put sets slot i and its tag. The slot is written before its tag: a
// reader that sees an entry's tag finds the entry.
func (ix *index) put(i uint64, e *entry, tag uint64) {
	g, shift := &ix.groups[i/groupSlots], i%groupSlots*8
	g.slots[i%groupSlots].Store(e)
	g.tags.Store(g.tags.Load()&^(0xff<<shift) | tag<<shift)
}

// tag returns slot i's tag.
func (ix *index) tag(i uint64) uint64 {
	return ix.groups[i/groupSlots].tags.Load() >> (i % groupSlots * 8) & 0xff
}

// after and before return the slots probed after and before slot i.
func (ix *index) after(i uint64) uint64 {
	if i+1 == ix.n {
		return 0
	}
	return i + 1
}

func (ix *index) before(i uint64) uint64 {
	if i == 0 {
		return ix.n - 1
	}
	return i - 1
}

// tryLockAt locks the entry in slot i, if it holds one that no one holds
// now, and returns it with its state. Sweeping and eviction use it. The
// caller holds the shard lock.
func (ix *index) tryLockAt(i uint64, swaps bool) (*entry, algorithm.State, bool) {
	e := ix.slot(i).Load()
	if e == nil || e == tombstone {
		return nil, algorithm.State{}, false
	}
	st, ok := e.tryLock(swaps)
	return e, st, ok
}

// full reports whether one more entry would fill the index past 3/4.
func (ix *index) full() bool { return uint64(ix.used+1)*4 > ix.n*3 }

// sparse reports whether the index is mostly empty slots and tombstones
// (after keys expired): worth rebuilding smaller.
func (ix *index) sparse() bool { return ix.n > 64 && uint64(ix.live)*8 < ix.n }

// rebuilt returns a new index holding ix's live entries, sized for twice
// as many as it holds plus one. hash is the store's key hash.
func (ix *index) rebuilt(hash func(string) uint64) *index {
	nx := newIndex((ix.live + 1) * 2)
	for i := range ix.n {
		e := ix.slot(i).Load()
		if e == nil || e == tombstone {
			continue
		}
		h := hash(e.key)
		_, at := nx.locate(h, e.key)
		nx.set(at, e, h)
		nx.used++
		nx.live++
	}
	return nx
}
