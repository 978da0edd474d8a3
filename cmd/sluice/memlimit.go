package main

import (
	"errors"
	"log/slog"
	"math"
	"os"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// containerMemory sets the Go runtime's memory limit to 90% of the process's
// cgroup memory limit (the container's), unless GOMEMLIMIT is set, or
// AUTOMEMLIMIT is "off" (or another share, such as 0.8). The memory
// store holds up to store.max_bytes live (384 MiB by default), and Go's
// collector lets the heap grow to twice what is live before it runs: in a
// container whose limit lies between the two, the process would be
// killed where, with the runtime's limit, the collector runs sooner.
// Outside a container, or in one without a limit, nothing changes.
func containerMemory(log *slog.Logger) {
	limit, err := memlimit.Set()
	switch {
	case errors.Is(err, memlimit.ErrNoCgroup) || errors.Is(err, memlimit.ErrCgroupsNotSupported):
		log.Debug("no container memory limit to follow", "reason", err)
	case err != nil:
		log.Warn("cannot read the container's memory limit: the Go runtime's memory is not limited (set GOMEMLIMIT)", "error", err)
	case limit < math.MaxInt64:
		from := "container"
		if os.Getenv("GOMEMLIMIT") != "" {
			from = "GOMEMLIMIT"
		}
		log.Info("memory limit", "bytes", limit, "from", from)
	}
}
