package partition

import (
	"encoding/json"
	"fmt"
	"sort"

	"holdfast/internal/records"
)

// ProducerState is the idempotent producers' state as of an offset, built
// from batches alone, as the partition builds its own (recordProducer,
// notePID): tiered storage uploads one with each segment (the state at the
// segment's end), and a topic restored from the object store starts with
// the last one, so that a producer's retry of a batch stored before the
// restore is answered with its offsets, not written twice, and its next
// batch is in sequence.
type ProducerState struct {
	End       int64                      `json:"end_offset"` // the state covers the batches below End
	Producers map[int64]snapshotProducer `json:"producers"`
}

// maxRestoredProducers bounds a restore command (about 300 bytes a
// producer): past it the producers that wrote last are kept.
const maxRestoredProducers = 10000

// Clone returns a deep copy.
func (s ProducerState) Clone() ProducerState {
	out := ProducerState{End: s.End, Producers: make(map[int64]snapshotProducer, len(s.Producers))}
	for id, e := range s.Producers {
		e.Batches = append([]batchJSON(nil), e.Batches...)
		out.Producers[id] = e
	}
	return out
}

// MaxProducerID is the highest producer id in the state, -1 if none.
func (s ProducerState) MaxProducerID() int64 {
	m := int64(-1)
	for id := range s.Producers {
		m = max(m, id)
	}
	return m
}

// DropFrom removes the producers whose id is at or above id and returns
// how many it removed.
func (s *ProducerState) DropFrom(id int64) int {
	n := 0
	for pid := range s.Producers {
		if pid >= id {
			delete(s.Producers, pid)
			n++
		}
	}
	return n
}

// Len is the number of producers.
func (s ProducerState) Len() int { return len(s.Producers) }

// Apply adds one batch (its header) to the state, as the partition does
// for an appended batch: a producer's last maxCachedBatches batches and
// its epoch; a transaction marker's newer epoch starts the producer
// afresh.
func (s *ProducerState) Apply(h records.Header) {
	if s.Producers == nil {
		s.Producers = map[int64]snapshotProducer{}
	}
	s.End = max(s.End, h.LastOffset()+1)
	if h.ProducerID < 0 {
		return
	}
	e, known := s.Producers[h.ProducerID]
	if h.IsControl() {
		if known && h.ProducerEpoch > e.Epoch {
			e.Epoch, e.Batches = h.ProducerEpoch, nil
			s.Producers[h.ProducerID] = e
		}
		return
	}
	if h.BaseSequence < 0 {
		return
	}
	if !known {
		e = snapshotProducer{Epoch: h.ProducerEpoch, Last: h.MaxTimestamp}
	}
	if h.ProducerEpoch != e.Epoch {
		e.Epoch, e.Batches = h.ProducerEpoch, nil
	}
	if len(e.Batches) == maxCachedBatches {
		e.Batches = append([]batchJSON(nil), e.Batches[1:]...)
	}
	lat := int64(-1)
	if h.LogAppendTime() {
		lat = h.MaxTimestamp
	}
	e.Batches = append(e.Batches, batchJSON{FirstSeq: h.BaseSequence, LastSeq: lastSeq(h.BaseSequence, h.LastOffsetDelta),
		BaseOffset: h.BaseOffset, LastOffset: h.LastOffset(), AppendTime: lat, CRC: h.CRC})
	e.Last = max(e.Last, h.MaxTimestamp)
	s.Producers[h.ProducerID] = e
}

// Expire forgets the producers idle since before nowMs-producerExpiry
// (producer.id.expiration.ms), as the partition does.
func (s *ProducerState) Expire(nowMs int64) {
	cutoff := nowMs - producerExpiry.Milliseconds()
	for id, e := range s.Producers {
		if e.Last < cutoff {
			delete(s.Producers, id)
		}
	}
}

// NextSequence is the sequence producer id's next batch must start at in
// epoch; ok=false if the state does not know the producer.
func (s ProducerState) NextSequence(id int64) (epoch int16, seq int32, ok bool) {
	e, ok := s.Producers[id]
	if !ok {
		return 0, 0, false
	}
	if n := len(e.Batches); n > 0 {
		return e.Epoch, nextSeq(e.Batches[n-1].LastSeq), true
	}
	return e.Epoch, 0, true
}

// A restore-producers command installs a ProducerState in every replica's
// producer state, at one point of the partition's log (a Raft side entry,
// like the log-start command): u8 kind 'P' | JSON. Only producers the
// replica does not know yet are installed (one that wrote since has a
// newer state), so applying it again after a restart changes nothing.
const cmdRestoreProducers = 'P'

// RestoreProducersCommand is the command installing s (the producers that
// wrote last, at most maxRestoredProducers).
func RestoreProducersCommand(s ProducerState) ([]byte, error) {
	if len(s.Producers) > maxRestoredProducers {
		ids := make([]int64, 0, len(s.Producers))
		for id := range s.Producers {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return s.Producers[ids[i]].Last > s.Producers[ids[j]].Last })
		s = s.Clone()
		for _, id := range ids[maxRestoredProducers:] {
			delete(s.Producers, id)
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	return append([]byte{cmdRestoreProducers}, b...), nil
}

// parseRestoreProducers returns the state a command installs.
func parseRestoreProducers(cmd []byte) (ProducerState, bool, error) {
	if len(cmd) == 0 || cmd[0] != cmdRestoreProducers {
		return ProducerState{}, false, nil
	}
	var s ProducerState
	if err := json.Unmarshal(cmd[1:], &s); err != nil {
		return ProducerState{}, true, fmt.Errorf("a restore-producers command: %w", err)
	}
	return s, true, nil
}

// installProducers adds the producers of s this partition does not know,
// and keeps s for a rebuild of the state from the log (rebuildLocked).
func (p *Partition) installProducers(s ProducerState) int {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	p.restored = &s
	return p.installLocked(s)
}

// installLocked is installProducers under appendMu.
func (p *Partition) installLocked(s ProducerState) int {
	n := 0
	for id, sp := range s.Producers {
		if _, ok := p.producers[id]; ok || len(sp.Batches) > maxCachedBatches {
			continue
		}
		e := &producer{epoch: sp.Epoch, last: sp.Last}
		for _, b := range sp.Batches {
			e.batches = append(e.batches, batchMeta{FirstSeq: b.FirstSeq, LastSeq: b.LastSeq, baseOffset: b.BaseOffset, lastOffset: b.LastOffset, appendTime: b.AppendTime, crc: b.CRC})
		}
		p.putProducer(id, e)
		n++
	}
	return n
}

// applyRestoreProducers installs the state of a committed restore-producers
// command.
func (p *Partition) applyRestoreProducers(cmd []byte) {
	s, ok, err := parseRestoreProducers(cmd)
	if !ok {
		return
	}
	if err != nil {
		p.logger().Warn("restoring the producer state", "err", err)
		return
	}
	if n := p.installProducers(s); n > 0 {
		p.logger().Info("producer state restored from the object store", "topic", p.topic, "partition", p.index, "producers", n, "as_of_offset", s.End)
	}
}
