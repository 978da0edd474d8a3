//go:build e2e

package pgstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/pgstore"
	"github.com/sluicehq/sluice/storetest"
)

// TestConformanceDurable replays the scenarios with every state in the
// logged table: the tables differ in the statements that read and write a
// row, which every scenario runs, not in the decision.
func TestConformanceDurable(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	_, pool := database(t)
	storetest.RunScenarios(t, storesOn(pool, pgstore.Options{Durable: true}))
}
