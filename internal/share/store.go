package share

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"holdfast/internal/records"
)

// The durable share-partition state lives in the group's own
// __consumer_offsets partition, next to its offsets, as records of a key
// type Kafka does not use there (Kafka keeps it in __share_group_state;
// one topic here means one coordinator to find, one replay, and the same
// replicated, compacted, fsynced path as offset commits). The group
// coordinator's replay skips these keys; the Store replays them.
//
// Key:   int16 KeyVersion, int16 len + group, [16]byte topic id, int32 partition.
// Value: int16 0, int32 state epoch, int32 leader epoch, int64 start
//
//	offset, int32 n, n × (int64 first, int64 last, int8 state, int16 count).
//
// A nil value (tombstone) deletes the share partition's state.
const KeyVersion int16 = 0x5348 // "SH"

// maxBatches bounds the batches of one snapshot (a window of at most
// share.partition.max.record.locks offsets has at most that many).
const maxBatches = 1 << 16

// Errors of the Store; the broker maps them onto Kafka codes.
var (
	ErrNotCoordinator    = errors.New("share: not the coordinator of this group")
	ErrLoading           = errors.New("share: coordinator is loading")
	ErrFencedLeaderEpoch = errors.New("share: write from an older partition leader")
	ErrFencedStateEpoch  = errors.New("share: the share partition's state was reset")
)

// Key names one share partition.
type Key struct {
	Group     string
	TopicID   [16]byte
	Partition int32
}

// Log is one __consumer_offsets partition as the Store sees it (the
// coordinator's internal log).
type Log interface {
	Append(batch []byte) (int64, error)
	WaitCommitted(ctx context.Context, end int64) error
	Scan(fn func(batch []byte) error) error
}

// Store is the durable share-partition state of the groups whose
// __consumer_offsets partitions this node leads.
type Store struct {
	logs         []Log
	partitionFor func(group string) int32
	log          *slog.Logger

	mu    sync.Mutex
	parts []*storePart
}

type storePart struct {
	owned, loaded bool
	gen           uint64
	states        map[Key]*entry
	live          map[string]int // group -> share partitions with state (not deleted)
}

// set replaces k's entry, keeping live counts.
func (sp *storePart) set(k Key, e *entry) {
	if old := sp.states[k]; old != nil && !old.deleted {
		sp.live[k.Group]--
	}
	if !e.deleted {
		sp.live[k.Group]++
	}
	if sp.live[k.Group] <= 0 {
		delete(sp.live, k.Group)
	}
	sp.states[k] = e
}

type entry struct {
	snap    Snapshot
	deleted bool // tombstoned: only its state epoch is kept, for fencing
}

// NewStore is a Store over logs (every partition unowned until
// LoadPartition).
func NewStore(logs []Log, partitionFor func(group string) int32, log *slog.Logger) *Store {
	s := &Store{logs: logs, partitionFor: partitionFor, log: log}
	for range logs {
		s.parts = append(s.parts, &storePart{states: map[Key]*entry{}, live: map[string]int{}})
	}
	return s
}

// LoadPartition replays partition p's share state (this node now leads it).
func (s *Store) LoadPartition(p int32) {
	s.mu.Lock()
	sp := s.parts[p]
	sp.gen++
	gen := sp.gen
	sp.owned, sp.loaded, sp.states, sp.live = true, false, map[Key]*entry{}, map[string]int{}
	s.mu.Unlock()
	go func() {
		states := map[Key]*entry{}
		err := s.logs[p].Scan(func(batch []byte) error {
			h, err := records.ParseHeader(batch)
			if err != nil {
				return err
			}
			if h.IsControl() {
				return nil
			}
			recs, err := records.Records(batch)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if len(r.Key) < 2 || int16(binary.BigEndian.Uint16(r.Key)) != KeyVersion {
					continue
				}
				k, err := decodeKey(r.Key)
				if err != nil {
					return fmt.Errorf("offset %d: %w", r.Offset, err)
				}
				if r.Value == nil {
					if e := states[k]; e != nil {
						e.deleted, e.snap.Batches = true, nil
						e.snap.StateEpoch++
					}
					continue
				}
				snap, err := decodeValue(r.Value)
				if err != nil {
					return fmt.Errorf("offset %d: %w", r.Offset, err)
				}
				states[k] = &entry{snap: snap}
			}
			return nil
		})
		s.mu.Lock()
		defer s.mu.Unlock()
		if sp.gen != gen {
			return
		}
		if err != nil {
			s.log.Error("replaying share-group state failed", "partition", p, "err", err)
			return
		}
		sp.states, sp.live, sp.loaded = states, map[string]int{}, true
		for k, e := range states {
			if !e.deleted {
				sp.live[k.Group]++
			}
		}
	}()
}

// UnloadPartition forgets partition p's state (another node leads it).
func (s *Store) UnloadPartition(p int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.parts[p]
	sp.gen++
	sp.owned, sp.loaded, sp.states, sp.live = false, false, map[Key]*entry{}, map[string]int{}
}

// Loaded reports whether group's partition is owned and replayed.
func (s *Store) Loaded(group string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.parts[s.partitionFor(group)]
	return sp.owned && sp.loaded
}

func (s *Store) partLocked(group string) (*storePart, error) {
	sp := s.parts[s.partitionFor(group)]
	switch {
	case !sp.owned:
		return nil, ErrNotCoordinator
	case !sp.loaded:
		return nil, ErrLoading
	}
	return sp, nil
}

// Read is a share partition's state for a leader in leaderEpoch: found is
// false if it has none (its StateEpoch is still the one to write with).
// A leader older than the last one seen is fenced.
func (s *Store) Read(k Key, leaderEpoch int32) (snap Snapshot, found bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, err := s.partLocked(k.Group)
	if err != nil {
		return snap, false, err
	}
	e := sp.states[k]
	if e == nil {
		e = &entry{deleted: true}
		sp.set(k, e)
	}
	if leaderEpoch < e.snap.LeaderEpoch {
		return snap, false, ErrFencedLeaderEpoch
	}
	e.snap.LeaderEpoch = leaderEpoch
	return cloneSnap(e.snap), !e.deleted, nil
}

// Write stores a share partition's new state and waits until it is
// committed. A write from an older leader, or one made before the state
// was reset (Alter/Delete offsets), is fenced.
func (s *Store) Write(ctx context.Context, k Key, snap Snapshot) error {
	end, lg, err := s.write(k, snap, false)
	if err != nil {
		return err
	}
	return lg.WaitCommitted(ctx, end)
}

func (s *Store) write(k Key, snap Snapshot, reset bool) (int64, Log, error) {
	if len(snap.Batches) > maxBatches {
		return 0, nil, fmt.Errorf("share: %d state batches, more than %d", len(snap.Batches), maxBatches)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, err := s.partLocked(k.Group)
	if err != nil {
		return 0, nil, err
	}
	if e := sp.states[k]; e != nil && !reset {
		switch {
		case snap.LeaderEpoch < e.snap.LeaderEpoch:
			return 0, nil, ErrFencedLeaderEpoch
		case snap.StateEpoch != e.snap.StateEpoch:
			return 0, nil, ErrFencedStateEpoch
		}
	}
	p := s.partitionFor(k.Group)
	batch, err := buildBatch([]kv{{encodeKey(k), encodeValue(snap)}})
	if err != nil {
		return 0, nil, err
	}
	end, err := s.logs[p].Append(batch)
	if err != nil {
		return 0, nil, err
	}
	sp.set(k, &entry{snap: cloneSnap(snap)})
	return end, s.logs[p], nil
}

// GroupState is one share partition's state as the admin APIs show it.
type GroupState struct {
	Key
	StartOffset int64
	LeaderEpoch int32
	StateEpoch  int32
}

// List is group's share partitions with state, sorted.
func (s *Store) List(group string) ([]GroupState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, err := s.partLocked(group)
	if err != nil {
		return nil, err
	}
	var out []GroupState
	for k, e := range sp.states {
		if k.Group == group && !e.deleted {
			out = append(out, GroupState{Key: k, StartOffset: e.snap.StartOffset, LeaderEpoch: e.snap.LeaderEpoch, StateEpoch: e.snap.StateEpoch})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.TopicID != b.TopicID {
			return string(a.TopicID[:]) < string(b.TopicID[:])
		}
		return a.Partition < b.Partition
	})
	return out, nil
}

// HasState reports whether group has any share-partition state here.
func (s *Store) HasState(group string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, err := s.partLocked(group)
	return err == nil && sp.live[group] > 0
}

// Reset sets a share partition's start offset (AlterShareGroupOffsets):
// a new state epoch fences the leader's in-memory state, which reloads.
func (s *Store) Reset(ctx context.Context, k Key, start int64) error {
	s.mu.Lock()
	sp, err := s.partLocked(k.Group)
	snap := Snapshot{StartOffset: start}
	if err == nil {
		if e := sp.states[k]; e != nil {
			snap.StateEpoch, snap.LeaderEpoch = e.snap.StateEpoch+1, e.snap.LeaderEpoch
		}
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	end, lg, err := s.write(k, snap, true)
	if err != nil {
		return err
	}
	return lg.WaitCommitted(ctx, end)
}

// Delete removes the state of group's share partitions that match (nil
// match: all of them), with tombstones, and waits for the commit.
func (s *Store) Delete(ctx context.Context, group string, match func(Key) bool) error {
	s.mu.Lock()
	sp, err := s.partLocked(group)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	var kvs []kv
	for k, e := range sp.states {
		if k.Group == group && !e.deleted && (match == nil || match(k)) {
			kvs = append(kvs, kv{encodeKey(k), nil})
			snap := e.snap
			snap.Batches = nil
			snap.StateEpoch++
			sp.set(k, &entry{snap: snap, deleted: true})
		}
	}
	if len(kvs) == 0 {
		s.mu.Unlock()
		return nil
	}
	p := s.partitionFor(group)
	batch, err := buildBatch(kvs)
	var end int64
	if err == nil {
		end, err = s.logs[p].Append(batch)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.logs[p].WaitCommitted(ctx, end)
}

func cloneSnap(s Snapshot) Snapshot {
	s.Batches = append([]Batch(nil), s.Batches...)
	return s
}

type kv struct{ key, value []byte }

func buildBatch(kvs []kv) ([]byte, error) {
	ts := time.Now().UnixMilli()
	recs := make([]records.Record, len(kvs))
	for i, p := range kvs {
		recs[i] = records.Record{Timestamp: ts, Key: p.key, Value: p.value}
	}
	return records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
}

func encodeKey(k Key) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(KeyVersion))
	b = binary.BigEndian.AppendUint16(b, uint16(len(k.Group)))
	b = append(b, k.Group...)
	b = append(b, k.TopicID[:]...)
	return binary.BigEndian.AppendUint32(b, uint32(k.Partition))
}

func decodeKey(b []byte) (Key, error) {
	var k Key
	if len(b) < 4 {
		return k, errors.New("share state key too short")
	}
	n := int(binary.BigEndian.Uint16(b[2:]))
	if len(b) != 4+n+16+4 {
		return k, errors.New("share state key of the wrong length")
	}
	k.Group = string(b[4 : 4+n])
	copy(k.TopicID[:], b[4+n:])
	k.Partition = int32(binary.BigEndian.Uint32(b[4+n+16:]))
	return k, nil
}

func encodeValue(s Snapshot) []byte {
	b := make([]byte, 0, 26+19*len(s.Batches))
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(s.StateEpoch))
	b = binary.BigEndian.AppendUint32(b, uint32(s.LeaderEpoch))
	b = binary.BigEndian.AppendUint64(b, uint64(s.StartOffset))
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Batches)))
	for _, x := range s.Batches {
		b = binary.BigEndian.AppendUint64(b, uint64(x.First))
		b = binary.BigEndian.AppendUint64(b, uint64(x.Last))
		b = append(b, byte(x.State))
		b = binary.BigEndian.AppendUint16(b, uint16(x.Count))
	}
	return b
}

func decodeValue(b []byte) (Snapshot, error) {
	var s Snapshot
	if len(b) < 22 || binary.BigEndian.Uint16(b) != 0 {
		return s, errors.New("share state value: bad header")
	}
	s.StateEpoch = int32(binary.BigEndian.Uint32(b[2:]))
	s.LeaderEpoch = int32(binary.BigEndian.Uint32(b[6:]))
	s.StartOffset = int64(binary.BigEndian.Uint64(b[10:]))
	n := int(binary.BigEndian.Uint32(b[18:]))
	if n > maxBatches || len(b) != 22+19*n {
		return s, errors.New("share state value of the wrong length")
	}
	b = b[22:]
	for range n {
		s.Batches = append(s.Batches, Batch{
			First: int64(binary.BigEndian.Uint64(b)),
			Last:  int64(binary.BigEndian.Uint64(b[8:])),
			State: int8(b[16]),
			Count: int16(binary.BigEndian.Uint16(b[17:])),
		})
		b = b[19:]
	}
	return s, nil
}

// Groups is the ids of the groups with share-partition state in the
// partitions this node has loaded.
func (s *Store) Groups() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, sp := range s.parts {
		if !sp.owned || !sp.loaded {
			continue
		}
		for g := range sp.live {
			out = append(out, g)
		}
	}
	sort.Strings(out)
	return out
}
