package partition

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// Idempotent-producer state, per partition: for each producer id its epoch
// and its last few batches. Kafka keeps five because a producer has at most
// five requests in flight per partition, so any retry it can send is one of
// them.
const maxCachedBatches = 5

// producerExpiry is producer.id.expiration.ms's default: the state of a
// producer that has not written for this long is forgotten.
const producerExpiry = 24 * time.Hour

// sweepEvery: the state is swept of expired producers each time this many
// producer ids have been added.
const sweepEvery = 1024

type batchMeta struct {
	FirstSeq   int32
	LastSeq    int32
	baseOffset int64
	lastOffset int64
	appendTime int64
	// crc is the batch's CRC-32C for a batch of a producer state restored
	// from the object store (producerstate.go), 0 otherwise: a retry of
	// such a batch must be the same batch, since a producer of the new
	// cluster may have been handed the same id before the restore.
	crc uint32
}

// batchJSON is batchMeta's snapshot form.
type batchJSON struct {
	FirstSeq   int32  `json:"first_seq"`
	LastSeq    int32  `json:"last_seq"`
	BaseOffset int64  `json:"base_offset"`
	LastOffset int64  `json:"last_offset"`
	AppendTime int64  `json:"append_time"`
	CRC        uint32 `json:"crc,omitempty"` // restored batches only (batchMeta.crc)
}

type producer struct {
	epoch   int16
	batches []batchMeta // oldest first, at most maxCachedBatches
	last    int64       // unix ms of the last write, for expiry
}

// lastSeq is the sequence of a batch's last record; sequences wrap from
// MaxInt32 to 0.
func lastSeq(first, delta int32) int32 {
	return int32((int64(first) + int64(delta)) % (math.MaxInt32 + 1))
}

func nextSeq(s int32) int32 {
	if s == math.MaxInt32 {
		return 0
	}
	return s + 1
}

// seqBefore reports whether a comes before b in the wrapping sequence
// space (within half of it).
func seqBefore(a, b int32) bool {
	d := (int64(b) - int64(a) + (math.MaxInt32 + 1)) % (math.MaxInt32 + 1)
	return d > 0 && d < (math.MaxInt32+1)/2
}

// checkProducer decides what to do with a batch by its producer id, epoch
// and sequence: nil, nil to append it; a cached batch when it is a retry of
// one already written; or the Kafka error. Called with appendMu held.
//
// As Kafka's ProducerStateManager: a retry is recognised only as one of the
// producer's last maxCachedBatches batches (its first and last sequence),
// and answered with that batch's offsets - a success that names stored
// records. Anything else that is not the next sequence is
// OUT_OF_ORDER_SEQUENCE_NUMBER, also a sequence below the cache: a client
// has at most five batches in flight, so such a batch is no retry we could
// answer; it means this log lost records the producer was told are stored
// (a leader that lost data) or the producer is confused. Answering it
// DUPLICATE_SEQUENCE_NUMBER, which clients take as success, would drop the
// records silently. Holdfast never answers DUPLICATE_SEQUENCE_NUMBER.
func (p *Partition) checkProducer(h records.Header) (*batchMeta, error) {
	if h.ProducerID < 0 {
		return nil, nil // not idempotent
	}
	if h.BaseSequence < 0 || h.ProducerEpoch < 0 {
		return nil, fmt.Errorf("producer %d: epoch %d sequence %d: %w", h.ProducerID, h.ProducerEpoch, h.BaseSequence, kerr.InvalidRecord)
	}
	first, last := h.BaseSequence, lastSeq(h.BaseSequence, h.LastOffsetDelta)
	e := p.producers[h.ProducerID]
	if e == nil {
		// Nothing known of this producer (new, or expired). A first batch
		// starts at 0; anything else may follow batches we no longer know,
		// so accepting it could write a duplicate: the client resets its
		// sequence (KIP-360) and retries.
		if first != 0 {
			return nil, fmt.Errorf("producer %d unknown, sequence %d: %w", h.ProducerID, first, kerr.UnknownProducerID)
		}
		return nil, nil
	}
	switch {
	case h.ProducerEpoch < e.epoch:
		return nil, fmt.Errorf("producer %d epoch %d, current %d: %w", h.ProducerID, h.ProducerEpoch, e.epoch, kerr.InvalidProducerEpoch)
	case h.ProducerEpoch > e.epoch:
		if first != 0 {
			return nil, fmt.Errorf("producer %d new epoch %d starts at sequence %d: %w", h.ProducerID, h.ProducerEpoch, first, kerr.OutOfOrderSequenceNumber)
		}
		return nil, nil
	}
	for i := range e.batches {
		if b := &e.batches[i]; b.FirstSeq == first && b.LastSeq == last {
			if b.crc != 0 && b.crc != h.CRC {
				return nil, fmt.Errorf("producer %d epoch %d: sequence %d..%d matches a restored batch with other contents (another producer with the same id?): %w",
					h.ProducerID, h.ProducerEpoch, first, last, kerr.OutOfOrderSequenceNumber)
			}
			return b, nil
		}
	}
	if len(e.batches) == 0 {
		// The epoch was bumped by a transaction marker: a fresh start.
		if first != 0 {
			return nil, fmt.Errorf("producer %d epoch %d starts at sequence %d: %w", h.ProducerID, h.ProducerEpoch, first, kerr.OutOfOrderSequenceNumber)
		}
		return nil, nil
	}
	newest := e.batches[len(e.batches)-1]
	if first == nextSeq(newest.LastSeq) {
		return nil, nil
	}
	if oldest := e.batches[0]; seqBefore(first, oldest.FirstSeq) {
		return nil, fmt.Errorf("producer %d epoch %d: sequence %d..%d precedes every batch known here (oldest %d, expected %d); not a retry this partition can answer: %w",
			h.ProducerID, h.ProducerEpoch, first, last, oldest.FirstSeq, nextSeq(newest.LastSeq), kerr.OutOfOrderSequenceNumber)
	}
	return nil, fmt.Errorf("producer %d epoch %d: sequence %d, expected %d: %w", h.ProducerID, h.ProducerEpoch, first, nextSeq(newest.LastSeq), kerr.OutOfOrderSequenceNumber)
}

// dupOf is the producer, epoch and first sequence of a duplicate's original.
type dupOf struct {
	pid   int64
	epoch int16
	seq   int32
}

var errStopScan = errors.New("stop")

// ConfirmStored checks, once a Duplicate's offsets are committed, that the
// batch stored there is its original. In a cluster the cached original may
// have been proposed by this leader and never committed: a new leader's
// entries then took its offsets, and answering the retry with them would
// acknowledge records that are not stored. Such a retry gets
// NOT_LEADER_OR_FOLLOWER, so the producer sends it again to the new leader.
// An original already below the log start (DeleteRecords, retention) was
// stored; it passes. Not a duplicate: nil.
func (p *Partition) ConfirmStored(res AppendResult) error {
	if !res.Duplicate {
		return nil
	}
	return p.confirmStored(res)
}

func (p *Partition) confirmStored(res AppendResult) error {
	var found *records.Header
	err := p.log.ScanHeaders(res.BaseOffset, func(h records.Header) error {
		if h.LastOffset() >= res.BaseOffset {
			found = &h
			return errStopScan
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		if errors.Is(err, storage.ErrOffsetOutOfRange) || res.BaseOffset < p.log.StartOffset() {
			return nil
		}
		return fmt.Errorf("confirming the original of a retried batch: %w", err)
	}
	if found == nil && res.BaseOffset < p.log.StartOffset() {
		return nil
	}
	d := res.dup
	if found == nil || found.BaseOffset != res.BaseOffset || found.LastOffset() != res.LastOffset ||
		found.ProducerID != d.pid || found.ProducerEpoch != d.epoch || found.BaseSequence != d.seq {
		p.logger().Warn("a retried batch's original was not committed; the retry must go to the new leader",
			"producer_id", d.pid, "epoch", d.epoch, "sequence", d.seq, "offset", res.BaseOffset)
		return fmt.Errorf("producer %d sequence %d: the original at offset %d was not committed: %w", d.pid, d.seq, res.BaseOffset, kerr.NotLeaderForPartition)
	}
	return nil
}

// putProducer records a producer's state (under appendMu); producers is
// made by the first.
func (p *Partition) putProducer(id int64, e *producer) {
	if p.producers == nil {
		p.producers = map[int64]*producer{}
	}
	p.producers[id] = e
}

// recordProducer remembers an appended batch (h.BaseOffset set), written at
// seenMs (unix ms). Called with appendMu held, and while rebuilding the
// state from the log.
func (p *Partition) recordProducer(h records.Header, appendTime, seenMs int64) {
	if h.ProducerID < 0 || h.IsControl() || h.BaseSequence < 0 {
		return // not idempotent, a marker, or a coordinator's batch
	}
	e := p.producers[h.ProducerID]
	if e == nil {
		e = &producer{epoch: h.ProducerEpoch, last: seenMs}
		p.putProducer(h.ProducerID, e)
		if len(p.producers)%sweepEvery == 0 {
			p.sweepProducers()
		}
	}
	if h.ProducerEpoch != e.epoch {
		e.epoch, e.batches = h.ProducerEpoch, e.batches[:0]
	}
	if len(e.batches) == maxCachedBatches {
		copy(e.batches, e.batches[1:])
		e.batches = e.batches[:maxCachedBatches-1]
	}
	e.batches = append(e.batches, batchMeta{
		FirstSeq: h.BaseSequence, LastSeq: lastSeq(h.BaseSequence, h.LastOffsetDelta),
		baseOffset: h.BaseOffset, lastOffset: h.LastOffset(), appendTime: appendTime,
	})
	e.last = max(e.last, seenMs)
}

// sweepProducers forgets producers idle for longer than producerExpiry.
func (p *Partition) sweepProducers() {
	cutoff := p.now().Add(-producerExpiry).UnixMilli()
	for id, e := range p.producers {
		if e.last < cutoff {
			delete(p.producers, id)
		}
	}
}

// snapshotDir, under the manager's root, holds one file per partition with
// its producer state as of a clean close. It lives outside the partition's
// directory, which belongs to the storage package alone.
const snapshotDir = "producer-snapshots"

// snapshotVersion is the producer snapshot's format (its "version").
const snapshotVersion = 1

type snapshot struct {
	Version   int                        `json:"version"`
	TopicID   [16]byte                   `json:"topic_id"`   // a same-named new topic must not inherit it
	End       int64                      `json:"end_offset"` // the log end the state covers
	Producers map[int64]snapshotProducer `json:"producers"`
	// Transactions (txn.go): absent in snapshots from before they existed,
	// which is right, since none could be open then.
	OpenTxns    map[int64]int64 `json:"open_txns,omitempty"`
	AbortedTxns []AbortedTxn    `json:"aborted_txns,omitempty"`
}

type snapshotProducer struct {
	Epoch   int16       `json:"epoch"`
	Last    int64       `json:"last_ms"`
	Batches []batchJSON `json:"batches"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// writeSnapshot saves the producer state for a log whose end is end: CRC-32C
// then JSON, written to a temporary file, fsynced and renamed into place.
func (p *Partition) writeSnapshot(end int64) error {
	s := snapshot{Version: snapshotVersion, TopicID: p.id, End: end, Producers: make(map[int64]snapshotProducer, len(p.producers))}
	for id, e := range p.producers {
		sp := snapshotProducer{Epoch: e.epoch, Last: e.last}
		for _, b := range e.batches {
			sp.Batches = append(sp.Batches, batchJSON{b.FirstSeq, b.LastSeq, b.baseOffset, b.lastOffset, b.appendTime, b.crc})
		}
		s.Producers[id] = sp
	}
	p.txnMu.Lock()
	s.OpenTxns, s.AbortedTxns = p.txn.open, p.txn.aborted
	body, err := json.Marshal(s)
	p.txnMu.Unlock()
	if err != nil {
		return err
	}
	data := binary.BigEndian.AppendUint32(nil, crc32.Checksum(body, castagnoli))
	data = append(data, body...)
	name := p.snapPath()
	// The directory's name must be durable too (an entry of the data
	// directory): else a power cut after a clean stop drops every snapshot.
	if err := storage.MkdirAllDurable(p.fs, filepath.Dir(name)); err != nil {
		return err
	}
	// The snapshot's name is durable with the next fsync of the snapshot
	// directory, which the partitions closing together share (a stop
	// fsynced it once per partition: 100,000 directory fsyncs).
	if err := storage.WriteFileAtomicNoDirSync(p.fs, name, data); err != nil {
		return err
	}
	return p.snapSync.sync()
}

// emptyStateBelow reports whether the producer state is empty and the log
// holds no batch below end: loadProducers rebuilds exactly that state
// without a snapshot (it scans from the log start). Under appendMu.
func (p *Partition) emptyStateBelow(end int64) bool {
	if len(p.producers) > 0 || end > p.log.StartOffset() {
		return false
	}
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	return len(p.txn.open) == 0 && len(p.txn.aborted) == 0
}

// readSnapshot loads the snapshot if there is a valid one.
func (p *Partition) readSnapshot() (*snapshot, error) {
	f, err := p.fs.OpenFile(p.snapPath(), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	if n < 4 || n > 256<<20 {
		return nil, nil
	}
	data := make([]byte, n)
	if _, err := f.ReadAt(data, 0); err != nil && err != io.EOF {
		return nil, err
	}
	if binary.BigEndian.Uint32(data) != crc32.Checksum(data[4:], castagnoli) {
		return nil, nil
	}
	// A newer version is not damage: ignored, the snapshot would be
	// removed, and with it the producers whose batches retention removed.
	var v struct {
		Version int64 `json:"version"`
	}
	if err := json.Unmarshal(data[4:], &v); err == nil {
		if err := storage.CheckVersion(p.snapPath(), v.Version, snapshotVersion); err != nil {
			return nil, err
		}
	}
	var s snapshot
	if err := json.Unmarshal(data[4:], &s); err != nil || s.Version != snapshotVersion {
		return nil, nil
	}
	return &s, nil
}

// loadProducers rebuilds the producer state: from the snapshot of a clean
// close when it matches the log, otherwise by scanning the log. The
// snapshot is removed once read, so after a crash a stale one is never
// trusted - the scan is the source of truth. A snapshot that cannot be
// read (EMFILE, EIO) fails the open, to be retried, and stays: the scan
// cannot see the producers whose batches retention removed, and removing
// the snapshot would lose them for good (damaged content is ignored).
func (p *Partition) loadProducers() error {
	s, err := p.readSnapshot()
	if err != nil {
		return fmt.Errorf("partition %s-%d: reading the producer state snapshot: %w", p.topic, p.index, err)
	}
	end := p.log.EndOffset()
	from := p.log.StartOffset()
	if s != nil && s.TopicID == p.id && s.End <= end && s.End >= from {
		for id, sp := range s.Producers {
			e := &producer{epoch: sp.Epoch, last: sp.Last}
			for _, b := range sp.Batches {
				e.batches = append(e.batches, batchMeta{FirstSeq: b.FirstSeq, LastSeq: b.LastSeq, baseOffset: b.BaseOffset, lastOffset: b.LastOffset, appendTime: b.AppendTime, crc: b.CRC})
			}
			p.putProducer(id, e)
		}
		for id, first := range s.OpenTxns {
			p.txn.putOpen(id, first)
		}
		p.txn.aborted = append(p.txn.aborted, s.AbortedTxns...)
		from = s.End
	}
	if s != nil {
		if rerr := p.fs.Remove(p.snapPath()); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return rerr
		}
		if err := p.snapSync.sync(); err != nil {
			return err
		}
	}
	if from >= end {
		return nil
	}
	start := time.Now()
	n := 0
	err = p.log.Scan(from, func(h records.Header, batch []byte) error {
		n++
		if err := p.replayTxn(h, batch); err != nil {
			return err
		}
		lat := int64(-1)
		if h.LogAppendTime() {
			lat = h.MaxTimestamp
		}
		// The batch's own timestamp is the best guess of when it was
		// written; expiry is advisory, so a skewed clock only matters late.
		p.recordProducer(h, lat, h.MaxTimestamp)
		return nil
	})
	p.lg.Debug("rebuilt producer state from the log", "topic", p.topic, "partition", p.index, "from", from, "batches", n, "producers", len(p.producers), "took", time.Since(start))
	return err
}
