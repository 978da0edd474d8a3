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
