package sluice

// GuardOf is l's Guard, for the tests of sharing.
func GuardOf(l *Limiter) *Guard { return l.guard }

// SharedGuards counts the entries of the registry of shared Guards.
func SharedGuards() int {
	n := 0
	sharedGuards.Range(func(any, any) bool { n++; return true })
	return n
}
