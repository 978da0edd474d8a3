package memstore_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store { return memstore.New(memstore.Options{}) })
}

func TestSlots(t *testing.T) {
	storetest.RunSlots(t, func(t *testing.T) sluice.Slots { return memstore.New(memstore.Options{}) })
}
