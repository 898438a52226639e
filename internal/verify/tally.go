package verify

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Tally counts the records of a run as they are read back, in the order
// read. It needs no acknowledgements until Report, so it can run while
// the producers still do. Safe for concurrent use.
type Tally struct {
	run *Run
	// NoOffsets: where a record was read is not compared with where it
	// was acknowledged (acks=0, or records read from another topic than
	// they were written to, as in consume-transform-produce).
	NoOffsets bool

	mu      sync.Mutex
	seen    map[ID]*sighting
	lastSeq map[pkey]int64 // (partition, producer) -> highest seq read
	parts   map[int32]*PartitionReport
	foreign int
}

type pkey struct {
	partition int32
	producer  int
}

type sighting struct {
	first Ack
	n     int
	more  []Ack // where it was read again (the first few)
}

// NewTally starts counting the run's records.
func (r *Run) NewTally() *Tally {
	return &Tally{run: r, seen: map[ID]*sighting{}, lastSeq: map[pkey]int64{}, parts: map[int32]*PartitionReport{}}
}

func (t *Tally) part(p int32) *PartitionReport {
	pr := t.parts[p]
	if pr == nil {
		pr = &PartitionReport{Partition: p}
		t.parts[p] = pr
	}
	return pr
}

// Observe counts one record read back (control records are skipped).
func (t *Tally) Observe(rec *kgo.Record) {
	if rec.Attrs.IsControl() {
		return
	}
	id, st := t.run.Parse(rec.Key, rec.Value)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch st {
	case Foreign:
		t.foreign++
		return
	case Corrupt:
		t.part(rec.Partition).Corrupt++
		t.run.logf("verify: corrupt record at %d/%d (%.60q)", rec.Partition, rec.Offset, rec.Value)
		return
	}
	t.observe(id, Ack{rec.Partition, rec.Offset})
}

// ObserveID counts id as read at partition/offset: for records whose
// reading the caller decoded itself (a consumer's processed set).
func (t *Tally) ObserveID(id ID, partition int32, offset int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.observe(id, Ack{partition, offset})
}

func (t *Tally) observe(id ID, at Ack) {
	pr := t.part(at.Partition)
	if s := t.seen[id]; s != nil {
		s.n++
		if len(s.more) < 4 {
			s.more = append(s.more, at)
		}
		pr.Duplicated++
		if pr.Duplicated <= 10 {
			t.run.logf("verify: %v read at %d/%d and again at %d/%d", id, s.first.Partition, s.first.Offset, at.Partition, at.Offset)
		}
		return
	}
	t.seen[id] = &sighting{first: at, n: 1}
	pr.Seen++
	k := pkey{at.Partition, id.Producer}
	if last, ok := t.lastSeq[k]; ok && id.Seq < last {
		pr.Reordered++
		if pr.Reordered <= 10 {
			t.run.logf("verify: %v at %d/%d after seq %d of its producer", id, at.Partition, at.Offset, last)
		}
	} else {
		t.lastSeq[k] = id.Seq
	}
}

// Seen is the number of distinct records of the run read so far.
func (t *Tally) Seen() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.seen)
}

// Missing returns how many of acks were not read yet, and a sample.
func (t *Tally) Missing(acks map[ID]Ack) (int, []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	var sample []string
	for id := range acks {
		if t.seen[id] == nil {
			n++
			if len(sample) < 10 {
				sample = append(sample, id.String())
			}
		}
	}
	return n, sample
}

// Report compares what was read with acks.
func (t *Tally) Report(acks map[ID]Ack) Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	parts := map[int32]*PartitionReport{}
	for p, pr := range t.parts {
		c := *pr
		parts[p] = &c
	}
	part := func(p int32) *PartitionReport {
		if parts[p] == nil {
			parts[p] = &PartitionReport{Partition: p}
		}
		return parts[p]
	}
	rep := Report{Run: t.run.ID, Topic: t.run.Topic, Foreign: t.foreign}
	at := map[Ack]ID{}
	var lost []ID
	for id, a := range acks {
		pr := part(a.Partition)
		pr.Acked++
		s := t.seen[id]
		if s == nil {
			pr.Lost++
			lost = append(lost, id)
			continue
		}
		if t.NoOffsets || a.Offset == NoOffset {
			continue
		}
		if a.Offset < 0 {
			pr.BadAck++
			if pr.BadAck <= 10 {
				t.run.logf("verify: %v acknowledged as a success at offset %d", id, a.Offset)
			}
			continue
		}
		if other, ok := at[a]; ok {
			pr.OffsetConflict++
			t.run.logf("verify: %v and %v both acknowledged at %d/%d", id, other, a.Partition, a.Offset)
		}
		at[a] = id
		if s.first != a && !slices.Contains(s.more, a) {
			pr.OffsetMismatch++
			if pr.OffsetMismatch <= 10 {
				t.run.logf("verify: %v acknowledged at %d/%d, read at %d/%d", id, a.Partition, a.Offset, s.first.Partition, s.first.Offset)
			}
		}
	}
	for id, s := range t.seen {
		if _, ok := acks[id]; !ok {
			part(s.first.Partition).Unacked++
		}
	}
	for _, pr := range parts {
		rep.Partitions = append(rep.Partitions, *pr)
		rep.add(*pr)
	}
	slices.SortFunc(rep.Partitions, func(a, b PartitionReport) int { return int(a.Partition) - int(b.Partition) })
	slices.SortFunc(lost, func(a, b ID) int {
		if a.Producer != b.Producer {
			return a.Producer - b.Producer
		}
		return int(a.Seq - b.Seq)
	})
	for _, id := range lost[:min(10, len(lost))] {
		a := acks[id]
		off := fmt.Sprint(a.Offset)
		if a.Offset == NoOffset {
			off = "?"
		}
		rep.LostSample = append(rep.LostSample, fmt.Sprintf("%v@%d/%s", id, a.Partition, off))
	}
	return rep
}

// Counts are the figures of a check, for a partition or in total.
type Counts struct {
	Acked      int `json:"acked"`      // acknowledged records
	Seen       int `json:"seen"`       // distinct records of the run read back
	Lost       int `json:"lost"`       // acknowledged, never read back
	Duplicated int `json:"duplicated"` // read again after their first reading
	// Reordered: read after a later record of the same producer, in one
	// partition.
	Reordered      int `json:"reordered"`
	Corrupt        int `json:"corrupt"`         // this format, bad checksum
	OffsetMismatch int `json:"offset_mismatch"` // read at another partition/offset than acknowledged
	OffsetConflict int `json:"offset_conflict"` // two records acknowledged at the same partition and offset
	BadAck         int `json:"bad_ack"`         // a success without an offset: no stored record is named
	// Unacked: read back but never acknowledged (allowed: the answer was
	// lost or came too late, the write was not).
	Unacked int `json:"unacked_stored"`
}

// OK is the strict pass: nothing lost, doubled, reordered, corrupt or
// misplaced.
func (c Counts) OK() bool {
	return c.Lost == 0 && c.Duplicated == 0 && c.Reordered == 0 && c.Corrupt == 0 &&
		c.OffsetMismatch == 0 && c.OffsetConflict == 0 && c.BadAck == 0
}

// LossFree is the pass every producer setting promises: no acknowledged
// record lost or altered.
func (c Counts) LossFree() bool { return c.Lost == 0 && c.Corrupt == 0 && c.BadAck == 0 }

func (c Counts) String() string {
	return fmt.Sprintf("acked=%d seen=%d lost=%d duplicated=%d reordered=%d corrupt=%d offset_mismatch=%d offset_conflict=%d bad_ack=%d unacked_stored=%d",
		c.Acked, c.Seen, c.Lost, c.Duplicated, c.Reordered, c.Corrupt, c.OffsetMismatch, c.OffsetConflict, c.BadAck, c.Unacked)
}

// PartitionReport is one partition's counts. Lost records count in the
// partition they were acknowledged in; the rest where they were read.
type PartitionReport struct {
	Partition int32 `json:"partition"`
	Counts
}

// Report is the outcome of a check.
type Report struct {
	Run   string `json:"run"`
	Topic string `json:"topic"`
	Counts
	Foreign    int               `json:"foreign"` // records of other runs or writers (ignored)
	Partitions []PartitionReport `json:"partitions"`
	LostSample []string          `json:"lost_sample,omitempty"` // producer/seq@partition/offset
}

func (r *Report) add(c PartitionReport) {
	r.Acked += c.Acked
	r.Seen += c.Seen
	r.Lost += c.Lost
	r.Duplicated += c.Duplicated
	r.Reordered += c.Reordered
	r.Corrupt += c.Corrupt
	r.OffsetMismatch += c.OffsetMismatch
	r.OffsetConflict += c.OffsetConflict
	r.BadAck += c.BadAck
	r.Unacked += c.Unacked
}

func (r Report) String() string {
	s := r.Counts.String() + fmt.Sprintf(" foreign=%d", r.Foreign)
	if len(r.LostSample) > 0 {
		s += " lost_sample=" + strings.Join(r.LostSample, ",")
	}
	return s
}
