// Package bench holds side-by-side benchmarks of sluice against other
// limiters. It is its own module so that their dependencies stay out of
// sluice's go.mod. Run from this directory:
//
//	go test -run '^$' -bench . -benchmem -cpu 2
//
// docs/performance.md records the figures and the exact commands.
package bench
