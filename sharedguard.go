package sluice

import (
	"log/slog"
	"reflect"
	"runtime"
	"sync"
	"time"
	"weak"
)

// Limiters made on one store share one Guard, and so one breaker, one
// prober and one stand-in, when their Guard settings are the same
// (Timeout, Local, Instances, Logger) and they set no OnStoreError (a
// hook of their own). The registry holds nothing alive: it keys by weak
// pointers and holds its Guards weakly, and an entry goes with its Guard
// once no Limiter uses it.
var sharedGuards sync.Map // guardKey → weak.Pointer[Guard]

type guardKey struct {
	store, local weak.Pointer[byte]
	timeout      time.Duration
	instances    int
	logger       weak.Pointer[slog.Logger]
}

// objectOf is a weak pointer to the object s points to, and whether s is
// a pointer at all (a store of another kind is never shared).
func objectOf(s Store) (weak.Pointer[byte], bool) {
	if s == nil {
		return weak.Pointer[byte]{}, true
	}
	v := reflect.ValueOf(s)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return weak.Pointer[byte]{}, false
	}
	return weak.Make((*byte)(v.UnsafePointer())), true
}

// sharedGuard returns the Guard a Limiter on store with opts uses: the
// one shared on store with the same settings, made if there is none.
func sharedGuard(store Store, opts LimiterOptions) (*Guard, error) {
	gopts := GuardOptions{Timeout: opts.Timeout, Local: opts.Local, Instances: opts.Instances, Logger: opts.Logger}
	s, ok1 := objectOf(store)
	l, ok2 := objectOf(opts.Local)
	if opts.OwnGuard || opts.OnStoreError != nil || !ok1 || !ok2 {
		gopts.OnStoreCall = storeErrors(opts.OnStoreError)
		return NewGuard(store, gopts)
	}
	k := guardKey{store: s, local: l, timeout: opts.Timeout, instances: opts.Instances}
	if opts.Logger != nil {
		k.logger = weak.Make(opts.Logger)
	}
	if v, ok := sharedGuards.Load(k); ok {
		if g := v.(weak.Pointer[Guard]).Value(); g != nil {
			return g, nil
		}
	}
	sharing.Lock() // one Guard made per key, not one per racing caller
	defer sharing.Unlock()
	if v, ok := sharedGuards.Load(k); ok {
		if g := v.(weak.Pointer[Guard]).Value(); g != nil {
			return g, nil
		}
	}
	g, err := NewGuard(store, gopts)
	if err != nil {
		return nil, err
	}
	w := weak.Make(g)
	sharedGuards.Store(k, w)
	runtime.AddCleanup(g, func(k guardKey) { sharedGuards.CompareAndDelete(k, w) }, k)
	return g, nil
}

var sharing sync.Mutex
