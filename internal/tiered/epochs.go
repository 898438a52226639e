package tiered

import (
	"sort"

	"holdfast/internal/partition"
)

// EndOffsetForEpoch answers OffsetForLeaderEpoch over the remote and the
// local log (KIP-405: a consumer validating a position in the remote log
// names an epoch the local epoch cache may have dropped): the largest
// epoch <= epoch, and the start offset of the next higher epoch, or the
// log end offset if it is the latest; (-1, -1) if no epoch <= epoch is
// known.
func (m *Manager) EndOffsetForEpoch(p *partition.Partition, epoch int32) (int32, int64) {
	mf, ok := m.Manifest(p)
	if !ok {
		return p.Log().EndOffsetForEpoch(epoch)
	}
	return endOffsetForEpoch(mergeEpochs(mf, p.Log().Epochs()), epoch, p.LogEndOffset())
}

// mergeEpochs is the remote segments' epoch starts followed by the local
// epoch cache's, without repeats: an epoch that continues from the remote
// log into the local one keeps its remote start.
func mergeEpochs(mf Manifest, local [][2]int64) [][2]int64 {
	var out [][2]int64
	add := func(e [2]int64) {
		if n := len(out); n > 0 && out[n-1][0] >= e[0] {
			return // the same epoch again (or an older one: never)
		}
		out = append(out, e)
	}
	for _, s := range mf.Segments {
		for _, e := range s.Epochs {
			add(e)
		}
	}
	for _, e := range local {
		add(e)
	}
	return out
}

func endOffsetForEpoch(epochs [][2]int64, epoch int32, end int64) (int32, int64) {
	i := sort.Search(len(epochs), func(i int) bool { return epochs[i][0] > int64(epoch) })
	if i == 0 {
		return -1, -1
	}
	if i == len(epochs) {
		return int32(epochs[i-1][0]), end
	}
	return int32(epochs[i-1][0]), epochs[i][1]
}
