package sluice

// GuardOf is l's Guard, for the tests of sharing.
func GuardOf(l *Limiter) *Guard { return l.guard }

// SharedGuards counts the entries of the registry of shared Guards.
func SharedGuards() int {
	n := 0
	sharedGuards.Range(func(any, any) bool { n++; return true })
	return n
}

// SeenSlots is the size of the stand-in's record of g, 0 without one.
func SeenSlots(g *Guard) int {
	if g.standin == nil {
		return 0
	}
	return len(g.standin.seen.Load().slots)
}
