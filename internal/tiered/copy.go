package tiered

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"

	"holdfast/internal/controller"
	"holdfast/internal/failpoint"
	"holdfast/internal/partition"
	"holdfast/internal/records"
)

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
	Topic     string     `json:"topic"`
	TopicID   string     `json:"topic_id"`
	Partition int32      `json:"partition"`
	Segment   Segment    `json:"segment"`
	Index     [][2]int64 `json:"offset_index"`
	// Aborted are the aborted transactions with records in the segment
	// (Kafka's transaction index): read_committed fetches skip them.
	Aborted []partition.AbortedTxn `json:"aborted_transactions,omitempty"`
}

// copySegment uploads the batches [from, next) of p's log as one segment
// (the .log object, then its .index): read through the log like any
// reader, checked batch by batch on the way.
func (m *Manager) copySegment(ctx context.Context, p *partition.Partition, t controller.Topic, from, next int64, epoch int32) (Segment, error) {
	f, err := m.tempFile()
	if err != nil {
		return Segment{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	seg := Segment{Base: from, Next: next, Epoch: epoch, MaxTimestamp: -1}
	sc := sidecar{Topic: t.Name, TopicID: t.IDString(), Partition: p.Index()}
	var crc uint32
	var pos, lastIndexed int64 = 0, -indexEvery
	lastEpoch := int64(-1)
	off := from
	for off < next {
		s, err := p.Log().Read(off, next, 1<<20)
		if err != nil {
			return Segment{}, fmt.Errorf("reading [%d, %d): %w", off, next, err)
		}
		buf, err := s.Bytes()
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
			seg.MaxTimestamp = max(seg.MaxTimestamp, h.MaxTimestamp)
			pos += int64(len(b))
			off = h.LastOffset() + 1
			rest = r
		}
		crc = crc32.Update(crc, castagnoli, buf)
		if _, err := w.Write(buf); err != nil {
			return Segment{}, err
		}
	}
	if off != next {
		return Segment{}, fmt.Errorf("segment [%d, %d) read up to %d", from, next, off)
	}
	if err := w.Flush(); err != nil {
		return Segment{}, err
	}
	seg.Size, seg.CRC = pos, crc
	sc.Segment = seg
	sc.Aborted = p.AbortedIn(seg.Base, next-1)
	key := m.key(t, p.Index(), seg)
	if err := m.store.PutFile(ctx, key+".log", f.Name()); err != nil {
		return Segment{}, fmt.Errorf("upload %s.log: %w", key, err)
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
	return seg, nil
}
