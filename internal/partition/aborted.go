package partition

// AbortedIn lists the aborted transactions overlapping offsets [from, to]
// that this replica's index holds: what tiered storage uploads with a
// segment (below the last stable offset every transaction in it is
// decided), so that read_committed fetches of the remote log skip them.
func (p *Partition) AbortedIn(from, to int64) []AbortedTxn { return p.abortedIn(from, to) }
