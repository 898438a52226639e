package tiered

import (
	"strings"
	"testing"

	"holdfast/internal/partition"
	"holdfast/internal/raft"
)

// TestManifestCommands: a manifest survives its command's encoding, a
// non-contiguous one is refused, the newest of several wins and other
// commands (the log-start command) are skipped.
func TestManifestCommands(t *testing.T) {
	m1 := Manifest{Start: 5, Segments: []Segment{{Base: 0, Next: 10, Epoch: 1, Size: 100, CRC: 7, MaxTimestamp: 3, Epochs: [][2]int64{{1, 0}}}}}
	m2 := Manifest{Start: 5, Segments: append(append([]Segment(nil), m1.Segments...), Segment{Base: 10, Next: 20, Epoch: 2, Size: 90})}
	c1, err := encodeManifest(m1)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := encodeManifest(m2)
	cmds := []raft.Committed{{Index: 3, Command: c1}, {Index: 4, Command: partition.LogStartCommand(5)}, {Index: 7, EndOffset: 20, Command: c2}}
	got, at, found, err := latestManifest(cmds)
	if err != nil || !found || at.Index != 7 || at.EndOffset != 20 || len(got.Segments) != 2 || got.End() != 20 || got.Size() != 190 {
		t.Fatalf("latest: %+v at %+v found %v err %v", got, at, found, err)
	}
	if _, ok, _ := decodeManifest(partition.LogStartCommand(5)); ok {
		t.Fatal("a log-start command decoded as a manifest")
	}
	gap, _ := encodeManifest(Manifest{Segments: []Segment{{Base: 0, Next: 10}, {Base: 11, Next: 20}}})
	if _, ok, err := decodeManifest(gap); !ok || err == nil || !strings.Contains(err.Error(), "contiguous") {
		t.Fatalf("a manifest with a gap: ok %v err %v", ok, err)
	}
}

// TestManifestFind: offsets below the remote log start, in a gap or past
// the end are not remote; the others find their segment.
func TestManifestFind(t *testing.T) {
	m := Manifest{Start: 5, Segments: []Segment{{Base: 0, Next: 10}, {Base: 10, Next: 25}, {Base: 25, Next: 26}}}
	for _, c := range []struct {
		off  int64
		base int64 // -1: not remote
	}{{0, -1}, {4, -1}, {5, 0}, {9, 0}, {10, 10}, {24, 10}, {25, 25}, {26, -1}, {1000, -1}} {
		s, ok := m.Find(c.off)
		if (c.base < 0) == ok || (ok && s.Base != c.base) {
			t.Errorf("Find(%d) = %+v, %v; want base %d", c.off, s, ok, c.base)
		}
	}
	if _, ok := (Manifest{}).Find(0); ok {
		t.Error("an empty manifest finds offset 0")
	}
}

// TestEndOffsetForEpoch: OffsetForLeaderEpoch over the remote epochs and
// the local cache, which dropped the epochs below its start.
func TestEndOffsetForEpoch(t *testing.T) {
	mf := Manifest{Segments: []Segment{
		{Base: 0, Next: 100, Epochs: [][2]int64{{1, 0}, {2, 40}}},
		{Base: 100, Next: 200, Epochs: [][2]int64{{2, 100}, {4, 150}}},
	}}
	local := [][2]int64{{4, 180}, {6, 300}} // the cache keeps epoch 4 from its start
	epochs := mergeEpochs(mf, local)
	for _, c := range []struct {
		ask, epoch int32
		end        int64
	}{{0, -1, -1}, {1, 1, 40}, {2, 2, 150}, {3, 2, 150}, {4, 4, 300}, {5, 4, 300}, {6, 6, 400}, {9, 6, 400}} {
		if e, end := endOffsetForEpoch(epochs, c.ask, 400); e != c.epoch || end != c.end {
			t.Errorf("epoch %d: (%d, %d), want (%d, %d)", c.ask, e, end, c.epoch, c.end)
		}
	}
}
