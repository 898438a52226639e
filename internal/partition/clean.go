package partition

import (
	"sort"

	"holdfast/internal/storage"
)

// Clean runs one log cleaning pass on p (storage.Log.Clean) within the
// limits of CleanLimits; opts supplies the rest (offset map, throttle,
// buffers, stop). Afterwards the aborted-transaction index forgets the
// transactions the pass left without records: their markers may go next,
// and a read_committed consumer told of one would skip the producer's
// later records while waiting for a marker that is gone.
func (p *Partition) Clean(opts storage.CleanOptions) (storage.CleanResult, error) {
	opts.Committed, opts.RemoveBelow = p.CleanLimits()
	res, err := p.log.Clean(opts)
	if res.CleanedEnd > 0 {
		p.pruneAborted(res.CleanedEnd)
	}
	return res, err
}

// pruneAborted drops the aborted transactions whose marker is below end.
func (p *Partition) pruneAborted(end int64) {
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	a := p.txn.aborted
	// Sorted by marker offset (appended in log order).
	if i := sort.Search(len(a), func(i int) bool { return a[i].LastOffset >= end }); i > 0 {
		p.txn.aborted = append([]AbortedTxn(nil), a[i:]...)
	}
}
