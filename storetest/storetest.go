// Package storetest is the conformance suite every sluice.Store must pass,
// in the manner of testing/fstest: Run replays the scenario files in
// storetest/testdata against fresh stores and runs property checks that
// compare the store with a sequential reference built on package algorithm.
//
// A store passes when it decides exactly as the pure algorithms do:
// scenario for scenario, request for request.
package storetest

import (
	"embed"
	"testing"

	"github.com/sluicehq/sluice"
)

//go:embed testdata/*.txt
var scenarioFiles embed.FS

// NewStore returns a Store with no state. Run calls it once per scenario and
// per property; stores sharing a backend must isolate themselves, for
// example with a fresh key prefix.
type NewStore func(t *testing.T) sluice.Store

// Run runs the whole suite against the stores newStore makes.
func Run(t *testing.T, newStore NewStore) {
	t.Run("scenarios", func(t *testing.T) { RunScenarios(t, newStore) })
	t.Run("properties", func(t *testing.T) { RunProperties(t, newStore) })
}
