package tiered

import (
	"encoding/json"
	"fmt"
	"slices"

	"holdfast/internal/raft"
)

// The commit rule. A partition's remote segments are listed by a manifest,
// a Raft command (a side entry: it takes no Kafka offset and no client ever
// sees it) in the partition's own Raft group. A segment is remote once a
// manifest naming it is committed there; only then may local retention
// move the log start past it. Each manifest is complete (every remote
// segment, not a delta), so the newest committed one is the whole truth,
// and local retention never compacts the log to or past the offset of the
// newest manifest's entry (Manager.localRetention): that entry survives
// every compaction, a restart finds it among the group's committed
// commands, and a follower that installs a snapshot (which says only "the
// log starts at X") receives it with the entries after X.

// cmdManifest is the command kind (partition.LogStartCommand is kind 1).
const cmdManifest = 'T'

// maxManifestSegments bounds a manifest (each segment costs ~150 bytes of
// JSON in every manifest command): past it the leader stops uploading and
// says so, and local retention waits.
const maxManifestSegments = 20000

// Segment is one uploaded segment: the offsets [Base, Next), the leader
// epoch of the leader that uploaded it (part of its key), its size and
// CRC-32C, its largest timestamp, and the leader epochs that start in it.
type Segment struct {
	Base         int64      `json:"base"`
	Next         int64      `json:"next"`
	Epoch        int32      `json:"epoch"`
	Size         int64      `json:"size"`
	CRC          uint32     `json:"crc32c"`
	MaxTimestamp int64      `json:"max_timestamp"`
	Epochs       [][2]int64 `json:"epochs,omitempty"` // (epoch, start offset)
	// Dir is the key directory, <topic>-<topic id>, of a segment another
	// incarnation of the topic uploaded (a restore); empty: this topic's.
	Dir string `json:"dir,omitempty"`
}

// sameObjects reports whether s and o name the same objects.
func (s Segment) sameObjects(o Segment) bool {
	return s.Dir == o.Dir && s.Base == o.Base && s.Epoch == o.Epoch && s.Next == o.Next
}

// Manifest is a partition's remote log: its segments, ascending and
// contiguous, and the remote log start (reads below it answer
// OFFSET_OUT_OF_RANGE; total retention raises it).
//
// Deleting are segments that left the remote log (total retention,
// DeleteRecords, a gap) whose objects are not deleted yet: a deletion is
// committed here first, carried out by the leader, and dropped from the
// list by the next manifest once the objects are gone, so that a crash in
// between leaves the deletion to the next leader or the next start.
type Manifest struct {
	Start    int64     `json:"start"`
	Segments []Segment `json:"segments"`
	Deleting []Segment `json:"deleting,omitempty"`
}

// End is the offset after the last remote segment (0 when none).
func (m Manifest) End() int64 {
	if len(m.Segments) == 0 {
		return 0
	}
	return m.Segments[len(m.Segments)-1].Next
}

// Find returns the segment holding offset, if it is remote and readable.
func (m Manifest) Find(offset int64) (Segment, bool) {
	if offset < m.Start {
		return Segment{}, false
	}
	i, _ := slices.BinarySearchFunc(m.Segments, offset, func(s Segment, o int64) int {
		switch {
		case s.Next <= o:
			return -1
		case s.Base > o:
			return 1
		}
		return 0
	})
	if i < len(m.Segments) && m.Segments[i].Base <= offset && offset < m.Segments[i].Next {
		return m.Segments[i], true
	}
	return Segment{}, false
}

// Size is the bytes of the remote segments.
func (m Manifest) Size() int64 {
	var n int64
	for _, s := range m.Segments {
		n += s.Size
	}
	return n
}

// encodeManifest is the command that commits m.
func encodeManifest(m Manifest) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append([]byte{cmdManifest}, b...), nil
}

// decodeManifest parses a manifest command; ok=false for other commands.
func decodeManifest(cmd []byte) (m Manifest, ok bool, err error) {
	if len(cmd) == 0 || cmd[0] != cmdManifest {
		return Manifest{}, false, nil
	}
	if err := json.Unmarshal(cmd[1:], &m); err != nil {
		return Manifest{}, true, fmt.Errorf("tiered: bad manifest command: %w", err)
	}
	for i, s := range m.Segments {
		if s.Next <= s.Base || (i > 0 && s.Base != m.Segments[i-1].Next) {
			return Manifest{}, true, fmt.Errorf("tiered: manifest segment %d [%d, %d) is not contiguous", i, s.Base, s.Next)
		}
	}
	return m, true, nil
}

// latestManifest picks the newest manifest among committed commands (in
// index order); found=false if there is none.
func latestManifest(cmds []raft.Committed) (m Manifest, at raft.Committed, found bool, err error) {
	for _, c := range cmds {
		mm, ok, derr := decodeManifest(c.Command)
		if !ok {
			continue
		}
		if derr != nil {
			err = derr
			continue
		}
		m, at, found = mm, c, true
	}
	return m, at, found, err
}
