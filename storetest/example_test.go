package storetest_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/storetest"
)

// A store of your own passes the suite every sluice store passes: the
// scenarios replayed with explicit time, the properties under concurrency,
// and the key-lifetime contract. In your store's tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) sluice.Store { return NewMyStore() })
//	}
func Example() {
	conformance := func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) sluice.Store { return memstore.New(memstore.Options{}) })
	}
	_ = conformance
}
