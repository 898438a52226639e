package tiered

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync"
	"time"

	"holdfast/internal/failpoint"
	"holdfast/internal/metadata"
	"holdfast/internal/partition"
	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// maxTimeIndex bounds a segment's time index (about 40 bytes an entry, in
// the .index every reader and every restore reads): past it a lookup may
// answer up to 1/1024 of the segment early.
const maxTimeIndex = 1024

// producersSuffix names a segment's producer snapshot object: the
// idempotent producers' state as of the segment's end (Kafka's producer
// snapshot), JSON of partition.ProducerState. Its own object, uploaded
// between the .log and the .index, since only the last segment's is ever
// read (by the next upload and by a restore) and it may be large.
const producersSuffix = ".producers"

// maxProducersObject bounds the producer snapshot object a reader accepts.
const maxProducersObject = 64 << 20

// thinTimeIndex keeps at most maxTimeIndex entries, evenly, and the last.
func thinTimeIndex(ix [][3]int64) ([][3]int64, bool) {
	if len(ix) <= maxTimeIndex {
		return ix, false
	}
	step := (len(ix) + maxTimeIndex - 1) / maxTimeIndex
	var out [][3]int64
	for i := 0; i < len(ix); i += step {
		out = append(out, ix[i])
	}
	if out[len(out)-1] != ix[len(ix)-1] {
		out = append(out, ix[len(ix)-1])
	}
	return out, true
}

// indexEvery is the spacing of the uploaded offset index's entries.
const indexEvery = 64 << 10

// maxSidecar bounds the .index object a reader accepts.
const maxSidecar = 64 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sidecar is a segment's .index object: what a reader needs besides the
// batches themselves. It names the partition and the segment (offsets,
// epochs, size, checksum), and holds a sparse offset index: (batch base
// offset, byte position) pairs about every indexEvery bytes. Timestamps
// are the segment's largest (a time index is not uploaded yet).
type sidecar struct {
	Topic     string `json:"topic"`
	TopicID   string `json:"topic_id"`
	Partition int32  `json:"partition"`
	// Partitions is the topic's partition count at the upload: a restore
	// gets it back even when the last partitions never uploaded (absent
	// in uploads from before it existed).
	Partitions int32      `json:"topic_partitions,omitempty"`
	Segment    Segment    `json:"segment"`
	Index      [][2]int64 `json:"offset_index"`
	// Aborted are the aborted transactions with records in the segment
	// (Kafka's transaction index): read_committed fetches skip them.
	Aborted []partition.AbortedTxn `json:"aborted_transactions,omitempty"`
	// TimeIndex answers ListOffsets by timestamp without the segment:
	// (timestamp, base offset, last offset) of each batch whose largest
	// timestamp is above every earlier batch's in the segment, the only
	// batches such a lookup can answer (the first batch whose timestamp
	// reaches a target raises the running largest). Beyond
	// maxTimeIndex entries it is thinned (TimeIndexSparse), and a lookup
	// answers no later than the exact batch. Absent in uploads from
	// before it existed: a lookup answers the segment's base.
	TimeIndex       [][3]int64 `json:"time_index,omitempty"`
	TimeIndexSparse bool       `json:"time_index_sparse,omitempty"`
}

// copySegment uploads the batches [from, next) of p's log as one segment
// (the .log object, then its .index): read through the log like any
// reader, checked batch by batch on the way, then streamed from the log
// to the object store (segmentReader). No copy of the segment is written
// to the local disk on the way: that write's writeback shared the disk,
// and ext4's journal, with the produce path's fsyncs (issue 28).
func (m *Manager) copySegment(ctx context.Context, p *partition.Partition, t metadata.Topic, st *partState, from, next int64, epoch int32) (Segment, error) {
	prod, err := m.producersAt(ctx, p, t, st, from)
	if err != nil {
		return Segment{}, err
	}
	seg := Segment{Base: from, Next: next, Epoch: epoch, MaxTimestamp: -1}
	sc := sidecar{Topic: t.Name, TopicID: t.IDString(), Partition: p.Index(), Partitions: t.Partitions}
	var crc uint32
	var pos, lastIndexed int64 = 0, -indexEvery
	lastEpoch := int64(-1)
	off := from
	chunk := chunkBufs.Get().(*[]byte)
	defer chunkBufs.Put(chunk)
	for off < next {
		s, err := p.Log().Read(off, next, 1<<20)
		if err != nil {
			return Segment{}, fmt.Errorf("reading [%d, %d): %w", off, next, err)
		}
		buf, err := s.BytesInto(*chunk)
		s.Release()
		if err != nil {
			return Segment{}, err
		}
		if len(buf) == 0 {
			return Segment{}, fmt.Errorf("reading [%d, %d): nothing at %d", from, next, off)
		}
		for rest := buf; len(rest) > 0; {
			b, r, err := records.Next(rest)
			if err != nil {
				return Segment{}, fmt.Errorf("segment at %d: %w", off, err)
			}
			h, err := records.ParseHeader(b)
			if err != nil {
				return Segment{}, err
			}
			if h.BaseOffset < off && off == from {
				// The first batch began below from (a log start mid-batch):
				// keep it whole, a reader skips to the offset it wants.
				seg.Base = h.BaseOffset
			}
			if pos-lastIndexed >= indexEvery {
				sc.Index = append(sc.Index, [2]int64{h.BaseOffset, pos})
				lastIndexed = pos
			}
			if e := int64(h.PartitionLeaderEpoch); e != lastEpoch {
				seg.Epochs = append(seg.Epochs, [2]int64{e, h.BaseOffset})
				lastEpoch = e
			}
			if h.MaxTimestamp > seg.MaxTimestamp {
				sc.TimeIndex = append(sc.TimeIndex, [3]int64{h.MaxTimestamp, h.BaseOffset, h.LastOffset()})
			}
			seg.MaxTimestamp = max(seg.MaxTimestamp, h.MaxTimestamp)
			prod.Apply(h)
			pos += int64(len(b))
			off = h.LastOffset() + 1
			rest = r
		}
		if m.copyThrottle != nil {
			m.copyThrottle.Wait(len(buf), ctx.Done())
			m.stats.CopyThrottledNanos.Store(int64(m.copyThrottle.Slept()))
		}
		crc = crc32.Update(crc, castagnoli, buf)
	}
	if off != next {
		return Segment{}, fmt.Errorf("segment [%d, %d) read up to %d", from, next, off)
	}
	seg.Size, seg.CRC = pos, crc
	sc.Segment = seg
	sc.Aborted = p.AbortedIn(seg.Base, next-1)
	sc.TimeIndex, sc.TimeIndexSparse = thinTimeIndex(sc.TimeIndex)
	prod.End = next
	// Expired as of the segment's end, by its timestamps, but never by a
	// client clock ahead of this node's.
	prod.Expire(min(seg.MaxTimestamp, time.Now().UnixMilli()))
	key := m.key(t, p.Index(), seg)
	body := &segmentReader{log: p.Log(), from: from, next: next, size: pos, crc: crc, chunk: *chunk}
	if err := m.store.PutStream(ctx, key+".log", body, pos); err != nil {
		return Segment{}, fmt.Errorf("upload %s.log: %w", key, err)
	}
	snap, err := json.Marshal(prod)
	if err != nil {
		return Segment{}, err
	}
	if err := m.store.Put(ctx, key+producersSuffix, snap); err != nil {
		return Segment{}, fmt.Errorf("upload %s%s: %w", key, producersSuffix, err)
	}
	if err := failpoint.Hit(ctx, "tiered.upload.between-objects", m.log); err != nil {
		return Segment{}, err
	}
	side, err := json.Marshal(sc)
	if err != nil {
		return Segment{}, err
	}
	if err := m.store.Put(ctx, key+".index", side); err != nil {
		return Segment{}, fmt.Errorf("upload %s.index: %w", key, err)
	}
	m.mu.Lock()
	st.prod, st.prodOK = prod, true
	m.mu.Unlock()
	return seg, nil
}

// segmentReader is a segment's bytes, the batches [from, next), read
// through the log again for its upload (each batch's CRC checked by the
// read). It hands out a chunk only once it has read it whole, and the last
// only if everything read matches what copySegment's pass recorded (size
// and CRC-32C): the object holds exactly the bytes its segment record
// describes, or the upload fails. Seek to the start reads again (the
// client's retry of a request).
type segmentReader struct {
	log        *storage.Log
	from, next int64
	size       int64  // bytes expected
	crc        uint32 // CRC-32C expected
	off        int64  // next offset to read from the log
	read       int64  // bytes read from the log
	sum        uint32
	buf        []byte // read, not yet handed out
	chunk      []byte // memory to read into (nil: allocated per read)
}

// chunkBufs are copySegment's read buffers: one for both of its reads
// through the log, the second after the first is done with it.
var chunkBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// errSegmentChanged: a segment's second read did not match its first.
var errSegmentChanged = errors.New("tiered: segment bytes changed between their check and their upload")

func (r *segmentReader) Read(p []byte) (int, error) {
	if r.read == 0 && r.off == 0 {
		r.off = r.from
	}
	for len(r.buf) == 0 {
		if r.off >= r.next {
			return 0, io.EOF
		}
		s, err := r.log.Read(r.off, r.next, 1<<20)
		if err != nil {
			return 0, fmt.Errorf("tiered: reading [%d, %d) for upload: %w", r.off, r.next, err)
		}
		b, err := s.BytesInto(r.chunk)
		s.Release()
		if err != nil {
			return 0, err
		}
		last := int64(-1)
		for rest := b; len(rest) > 0; {
			batch, tail, err := records.Next(rest)
			if err != nil {
				return 0, fmt.Errorf("tiered: segment at %d: %w", r.off, err)
			}
			h, err := records.ParseHeader(batch)
			if err != nil {
				return 0, err
			}
			last, rest = h.LastOffset(), tail
		}
		if last < r.off {
			return 0, fmt.Errorf("tiered: reading [%d, %d) for upload: nothing at %d", r.from, r.next, r.off)
		}
		r.off = last + 1
		r.read += int64(len(b))
		r.sum = crc32.Update(r.sum, castagnoli, b)
		if r.read > r.size || r.off >= r.next && (r.off != r.next || r.read != r.size || r.sum != r.crc) {
			return 0, fmt.Errorf("%w: [%d, %d), %d bytes read up to %d, %d expected", errSegmentChanged, r.from, r.next, r.read, r.off, r.size)
		}
		r.buf = b
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Seek supports what an HTTP client's retry needs: to the start, and
// where it is.
func (r *segmentReader) Seek(offset int64, whence int) (int64, error) {
	switch {
	case offset == 0 && whence == io.SeekStart:
		r.off, r.read, r.sum, r.buf = r.from, 0, 0, nil
		return 0, nil
	case offset == 0 && whence == io.SeekCurrent:
		return r.read - int64(len(r.buf)), nil
	}
	return 0, errors.New("tiered: a segment upload seeks only to its start")
}

// producersAt is the producer state as of offset from, the end of p's
// remote log, to which a new segment's batches are added: the one this
// node built with its last upload, else the remote log's last segment's
// producer snapshot (another leader uploaded it). The first segment of a
// remote log (or one after a gap) starts empty: producers whose batches
// all lie below it are not in the state (a topic that enabled remote
// storage after its log start moved).
func (m *Manager) producersAt(ctx context.Context, p *partition.Partition, t metadata.Topic, st *partState, from int64) (partition.ProducerState, error) {
	m.mu.Lock()
	cached, ok, mf := st.prod, st.prodOK, st.m
	m.mu.Unlock()
	if ok && cached.End == from {
		return cached.Clone(), nil
	}
	if len(mf.Segments) == 0 || mf.End() != from {
		return partition.ProducerState{End: from}, nil
	}
	last := mf.Segments[len(mf.Segments)-1]
	s, err := m.readProducers(ctx, m.key(t, p.Index(), last))
	if err != nil {
		return partition.ProducerState{}, err
	}
	if s == nil || s.End != from {
		m.log.Warn("the remote log's last segment has no producer snapshot; the next segments' start empty", "topic", t.Name, "partition", p.Index(), "base_offset", last.Base)
		return partition.ProducerState{End: from}, nil
	}
	return *s, nil
}

// readProducers reads the producer snapshot of the segment whose key is
// key (nil: it has none, an upload from before snapshots existed).
func (m *Manager) readProducers(ctx context.Context, key string) (*partition.ProducerState, error) {
	b, err := m.store.Get(ctx, key+producersSuffix, maxProducersObject)
	if err != nil {
		// Absent, or the store failing? A listing tells.
		if keys, lerr := m.store.List(ctx, key+producersSuffix); lerr == nil && !slices.Contains(keys, key+producersSuffix) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the producer snapshot %s%s: %w", key, producersSuffix, err)
	}
	var s partition.ProducerState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s%s: %w", key, producersSuffix, err)
	}
	return &s, nil
}
