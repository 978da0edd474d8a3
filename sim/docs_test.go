package sim_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/sim"
)

// docs/simulations.md must say what the simulator now produces: regenerate
// it with go generate ./sim after changing an algorithm or the simulator.
func TestDocsFiguresAreCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates every figure of the docs")
	}
	committed, err := os.ReadFile("../docs/simulations.md")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := sim.Figures(&b, ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(committed), b.String()) {
		t.Fatal("docs/simulations.md differs from the simulator's output: run go generate ./sim")
	}
}
