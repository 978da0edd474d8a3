package config

import (
	"time"

	"github.com/sluicehq/sluice"
)

// defaults is every default of the policy file, in one place: a file is
// decoded over these values, so a field left out keeps its default here.
var defaults = struct {
	store  storeYAML
	policy policyYAML
}{
	store: storeYAML{
		Type: "memory",
		// A ceiling for "the store is down", far above a healthy store's
		// slowest call on a saturated host (see sluice.DefaultTimeout).
		Timeout: sluice.DefaultTimeout,
		// Decide in memory while the store fails: neither open nor shut.
		FailMode: sluice.FailLocal,
		// The memory store's bound: about 200 bytes a key.
		MaxKeys: 4_000_000,
		// One sluice process unless told otherwise.
		Instances: 1,
		// local-sync: what an instance may overshoot by is its share of a
		// key per interval; 100ms keeps that small for per-second limits.
		SyncInterval: 100 * time.Millisecond,
		// shard: membership changes are noticed within a second.
		MemberInterval: time.Second,
	},
	policy: policyYAML{
		Key:      "client_ip",
		Cost:     1,
		FailMode: sluice.FailLocal,
	},
}
