package main

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// containerMemory sets the Go runtime's memory limit to 90% of the process's
// cgroup memory limit (the container's), unless GOMEMLIMIT is set, or
// AUTOMEMLIMIT is "off" (or another share, such as 0.8). The memory
// store holds up to store.max_bytes live (384 MiB by default), and Go's
// collector lets the heap grow to twice what is live before it runs: in a
// container whose limit lies between the two, the process would be
// killed where, with the runtime's limit, the collector runs sooner.
// Outside a container nothing changes.
//
// A container's limit can change while it runs (a pod resized in place):
// until stop is called, the limit is read again every memoryRefresh, and
// a change is followed and logged.
func containerMemory(log *slog.Logger) (stop func()) {
	m := &memoryLimit{log: log, limit: math.MaxInt64}
	if !m.set() {
		return func() {}
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		t := time.NewTicker(memoryRefresh)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				m.set()
			}
		}
	}()
	return stop
}

// memoryRefresh is how often containerMemory reads the container's limit
// again: a few small reads of cgroup files.
const memoryRefresh = 10 * time.Second

// memoryLimit is the runtime's memory limit as containerMemory last set it.
type memoryLimit struct {
	log     *slog.Logger
	limit   int64
	failing bool // the last read failed, and was logged
}

// set sets the runtime's limit from the container's, logging a change and
// the first of a run of failures, and reports whether the limit follows
// the container's: false without cgroups or with GOMEMLIMIT set.
func (m *memoryLimit) set() bool {
	limit, err := memlimit.Set()
	switch {
	case errors.Is(err, memlimit.ErrNoCgroup) || errors.Is(err, memlimit.ErrCgroupsNotSupported):
		m.log.Debug("no container memory limit to follow", "reason", err)
		return false
	case err != nil:
		if !m.failing {
			m.log.Warn("cannot read the container's memory limit: the Go runtime's memory limit is unchanged (set GOMEMLIMIT)", "error", err)
		}
		m.failing = true
		return true
	}
	m.failing = false
	if os.Getenv("GOMEMLIMIT") != "" {
		m.log.Info("memory limit", "bytes", limit, "from", "GOMEMLIMIT")
		return false
	}
	if limit != m.limit {
		m.log.Info("memory limit", "bytes", limit, "from", "container")
		m.limit = limit
	}
	return os.Getenv("AUTOMEMLIMIT") != "off"
}
