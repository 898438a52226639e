package tiered

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"holdfast/internal/partition"
)

// OffsetForTimestamp answers ListOffsets by timestamp from p's remote log
// (KIP-405: the remote log is searched first, then the local one): the
// first batch at or above the remote log start whose largest timestamp is
// at least ts, as the local log answers (its base offset, or the remote
// log start if the batch begins below it, and its largest timestamp).
// found=false: no remote segment has such a batch (the caller searches
// the local log). The manifest names the segment (its largest
// timestamp), the segment's .index its batch (time index), so nothing is
// downloaded but that object.
func (m *Manager) OffsetForTimestamp(ctx context.Context, p *partition.Partition, ts int64) (offset, timestamp int64, found bool, err error) {
	t, ok := m.topicFor(p)
	if !ok {
		return -1, -1, false, nil
	}
	mf, ok := m.Manifest(p)
	if !ok {
		return -1, -1, false, nil
	}
	for _, s := range mf.Segments {
		if s.MaxTimestamp < ts || s.Next <= mf.Start {
			continue
		}
		key := m.key(t, p.Index(), s) + ".index"
		b, err := m.store.Get(ctx, key, maxSidecar)
		if err != nil {
			m.stats.FetchErrors.Add(1)
			return -1, -1, false, fmt.Errorf("reading the time index in %s: %w", key, err)
		}
		var sc sidecar
		if err := json.Unmarshal(b, &sc); err != nil {
			return -1, -1, false, fmt.Errorf("%s: %w", key, err)
		}
		if off, mts, ok := lookupTime(sc.TimeIndex, sc.TimeIndexSparse, ts, mf.Start); ok {
			return off, mts, true, nil
		}
		if len(sc.TimeIndex) == 0 {
			// Uploaded without a time index: the segment's first offset,
			// no later than the batch asked for.
			return max(s.Base, mf.Start), s.MaxTimestamp, true, nil
		}
	}
	return -1, -1, false, nil
}

// lookupTime finds in a segment's time index the first batch whose
// largest timestamp is at least ts, at or above from. In a thinned index
// the batch may lie after the previous entry: the offset after that
// entry's batch is answered. When the batch found ends below from (the
// log start cut through the segment), a later batch that does not raise
// the running largest may be the one: from is answered. Either way the
// answer is never later than the exact one.
func lookupTime(ix [][3]int64, sparse bool, ts, from int64) (offset, timestamp int64, ok bool) {
	i := sort.Search(len(ix), func(i int) bool { return ix[i][0] >= ts })
	if i == len(ix) {
		return -1, -1, false
	}
	off := ix[i][1]
	if sparse && i > 0 {
		off = ix[i-1][2] + 1
	}
	return max(off, from), ix[i][0], true
}
