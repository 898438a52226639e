package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/bufref"
	"holdfast/internal/invariant"
	"holdfast/internal/raft"
	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// Errors that are not Kafka error codes. Every other error from Append is,
// or wraps, a *kerr.Error the broker answers as is.
var (
	// ErrOffsetOutOfRange: a read below the log start or above the log end.
	ErrOffsetOutOfRange = storage.ErrOffsetOutOfRange
	// ErrStorage wraps an I/O failure. After one, the partition refuses
	// appends, so nothing that may not be on disk is acknowledged.
	ErrStorage = errors.New("partition: storage failure")
)

// AppendResult describes an appended (or deduplicated) batch.
type AppendResult struct {
	BaseOffset, LastOffset int64
	LogAppendTime          int64 // -1 unless the topic uses LogAppendTime
	LogStartOffset         int64
	// Duplicate: the batch was a retry of one already in the log; nothing
	// was written and the offsets are the original ones.
	Duplicate bool
	// dup identifies the original of a Duplicate (ConfirmStored).
	dup dupOf
}

// ReadResult is what a fetch gets.
type ReadResult struct {
	Records          []byte // whole stored batches, possibly empty
	HighWatermark    int64
	LastStableOffset int64
	LogStartOffset   int64
	// Aborted lists, for read_committed reads, the aborted transactions
	// that overlap the records returned.
	Aborted []AbortedTxn
}

// Partition is one open partition.
type Partition struct {
	topic string
	id    [16]byte
	index int32
	// stateStale: see stateEnd (beside index: no word of padding).
	stateStale atomic.Bool
	dir        string // Manager.Dir: the producer snapshot's path follows from it (snapPath)
	log        *storage.Log
	fs         storage.FS
	lg         *slog.Logger // the manager's; logger adds the partition
	now        func() time.Time

	// epoch is the leader epoch: the Raft term of the last committed entry.
	epoch atomic.Int32
	// logAppendTime: message.timestamp.type=LogAppendTime.
	logAppendTime atomic.Bool

	// appendMu serializes appends and guards producers, made by the
	// first producer's batch (putProducer: most partitions of a node with
	// many see none, and an empty map was ~0.1 KiB each, issue 27).
	appendMu  sync.Mutex
	producers map[int64]*producer
	failed    atomic.Pointer[error]

	// txnMu guards txn (txn.go); verify checks transactional appends.
	txnMu  sync.Mutex
	txn    txnState
	verify *atomic.Pointer[Verifier]
	// snapSync makes the snapshot's removal durable (shared by the
	// manager's partitions: one fsync for many).
	snapSync *dirSyncer

	hwMu sync.Mutex
	hw   int64
	// hwCh is closed when hw next advances; made when Notify first asks
	// for it (a partition nobody long-polls holds none: issue 27).
	hwCh   chan struct{}
	closed bool

	// minStart is the log start committed log-start commands name; the
	// log's own start catches up once the segments are deleted.
	minStart atomic.Int64

	// rep is the partition's Raft group (replica.go): every partition is
	// one, a single node's with one voter. Set once by Open.
	rep *replica

	// stateEnd is the log offset up to which producers and txn reflect
	// the log (appendMu; read without it as an atomic). The leader moves it
	// as it proposes, a follower as entries commit (onCommit), so a new
	// leader needs no rescan; stateStale says a truncation took back
	// entries the state had counted, and the next leadership rebuilds it.
	stateEnd atomic.Int64
	// restored is the producer state a restore-producers command installed
	// (producerstate.go; appendMu): a rebuild from the log starts from it,
	// since the restored producers' batches are not in this log.
	restored *ProducerState
}

// logger is the partition's logger with its topic and partition attached.
// Made per message (few, on rare paths) rather than held: a logger with
// attributes preformatted was ~0.2 KiB per partition (issue 27).
func (p *Partition) logger() *slog.Logger {
	return p.lg.With("topic", p.topic, "partition", p.index)
}

// snapPath is the producer state snapshot file (producer.go): computed,
// not held (a path per partition was ~0.1 KiB, issue 27). p.dir is
// Manager.Dir's, so this is Manager.snapshotPath's.
func (p *Partition) snapPath() string {
	return snapshotPathIn(filepath.Dir(p.dir), p.topic, p.index)
}

func newPartition(topic string, id [16]byte, index int32, dir string, snapSync *dirSyncer, l *storage.Log, opts storage.Options, verify *atomic.Pointer[Verifier], r Replication) (*Partition, error) {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	p := &Partition{
		topic: topic, id: id, index: index, dir: dir, snapSync: snapSync, log: l,
		fs: opts.FS, lg: opts.Logger, now: now,
		verify: verify,
	}
	if err := p.loadProducers(); err != nil {
		return nil, fmt.Errorf("partition %s-%d: rebuilding producer state: %w", topic, index, err)
	}
	p.stateEnd.Store(l.EndOffset())
	if err := p.replicate(r); err != nil {
		return nil, fmt.Errorf("partition %s-%d: %w", topic, index, err)
	}
	return p, nil
}

func (p *Partition) Topic() string      { return p.topic }
func (p *Partition) Index() int32       { return p.index }
func (p *Partition) TopicID() [16]byte  { return p.id }
func (p *Partition) LeaderEpoch() int32 { return p.epoch.Load() }
func (p *Partition) Log() *storage.Log  { return p.log }

// SetLogAppendTime switches the topic's message.timestamp.type: with true,
// the broker stamps each batch with its append time.
func (p *Partition) SetLogAppendTime(on bool) { p.logAppendTime.Store(on) }

// Failed returns the error that stopped the partition on this node, if
// any: an I/O error here, or its Raft group's failure.
func (p *Partition) Failed() error {
	if e := p.failed.Load(); e != nil {
		return *e
	}
	if l := p.rep.lead.Load(); l != nil && !l.Failed {
		return nil // the group's failure is an event; it has not come
	}
	if err := p.rep.host.GroupFailed(p.rep.group); err != nil && !errors.Is(err, raft.ErrUnknownGroup) {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	return nil
}

func (p *Partition) fail(err error) error {
	err = fmt.Errorf("%w: %w", ErrStorage, err)
	if p.failed.CompareAndSwap(nil, &err) {
		p.logger().Error("partition storage failure; refusing appends", "err", err)
	}
	return err
}

// Append validates batch (one v2 record batch as a producer sent it),
// deduplicates idempotent retries and appends it to the page cache. It
// does not wait for durability; see WaitCommitted. The batch is modified in
// place (offsets, leader epoch, append time).
//
// The batch is checked here, once (records.Check, then every record
// decoded); what is below - the Raft host, the log - takes the checked
// batch as it is.
//
// Raft shares the batch's bytes (no copy): once Append has proposed it,
// the caller must never modify or reuse them; a buffer meant for reuse is
// appended with AppendOwned.
func (p *Partition) Append(batch []byte) (AppendResult, error) {
	return p.AppendOwned(batch, nil)
}

// AppendOwned is Append for a batch that lies in a counted buffer (a
// produce request's frame, wire.Request.FrameRef): the Raft host holds a
// reference to owner while it may read the batch (raft.Host.ProposeOwned),
// so the buffer is reused only after that.
func (p *Partition) AppendOwned(batch []byte, owner *bufref.Ref) (AppendResult, error) {
	maxBytes := p.log.Config().MaxMessageBytes
	v, err := records.Check(batch, maxBytes)
	if err != nil {
		return AppendResult{}, validationError(err)
	}
	h := v.Header()
	if !records.Dense(h) {
		// What a producer sends has a record per offset; only the log
		// cleaner leaves gaps.
		return AppendResult{}, validationError(fmt.Errorf("records: lastOffsetDelta %d with %d records: %w", h.LastOffsetDelta, h.NumRecords, records.ErrCorrupt))
	}
	// Decoding every record catches what the CRC cannot: a producer that
	// computed the CRC over garbage, or a bad compressed body.
	if p.log.Config().Compact {
		// Kafka refuses records without a key on a compacted topic: the
		// cleaner could only drop them.
		if err := p.checkKeys(batch); err != nil {
			return AppendResult{}, err
		}
	} else if err := records.ValidateRecords(batch); err != nil {
		return AppendResult{}, validationError(err)
	}
	if h.IsControl() {
		// Control batches are written by the transaction coordinator only.
		return AppendResult{}, fmt.Errorf("control batch from a producer: %w", kerr.InvalidRecord)
	}
	if h.IsTransactional() && h.ProducerID < 0 {
		return AppendResult{}, fmt.Errorf("transactional batch without a producer id: %w", kerr.InvalidRecord)
	}

	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if err := p.Failed(); err != nil {
		return AppendResult{}, err
	}
	// Leadership first: a follower's producer state may lag, so only the
	// leader's answers a retry.
	if err := p.leaderCheckLocked(); err != nil {
		return AppendResult{}, err
	}
	dup, err := p.checkProducer(h)
	if err != nil {
		return AppendResult{}, err
	}
	if dup != nil {
		lat := int64(-1)
		if p.logAppendTime.Load() {
			lat = dup.appendTime
		}
		return AppendResult{BaseOffset: dup.baseOffset, LastOffset: dup.lastOffset, LogAppendTime: lat,
			LogStartOffset: p.LogStartOffset(), Duplicate: true,
			dup: dupOf{pid: h.ProducerID, epoch: h.ProducerEpoch, seq: h.BaseSequence}}, nil
	}
	if h.IsTransactional() && !p.txnAdmittedLocked(h.ProducerID, h.ProducerEpoch) {
		// Only into a transaction the coordinator knows this partition is
		// part of: a batch after the marker would hang the LSO forever.
		// Known here already (txnAdmittedLocked), or asked now.
		v := p.verify.Load()
		if v == nil {
			return AppendResult{}, fmt.Errorf("no transaction coordinator: %w", kerr.InvalidTxnState)
		}
		if err := (*v)(p.topic, p.index, h.ProducerID, h.ProducerEpoch); err != nil {
			return AppendResult{}, err
		}
	}
	lat := int64(-1)
	if p.logAppendTime.Load() {
		lat = p.now().UnixMilli()
		v.SetLogAppendTime(lat)
	}
	base, err := p.proposeLocked(&v, owner)
	if err != nil {
		return AppendResult{}, err
	}
	h.BaseOffset = base
	p.recordProducer(h, lat, p.now().UnixMilli())
	if h.IsTransactional() {
		p.noteTxnBatch(h.ProducerID, base)
	}
	return AppendResult{BaseOffset: base, LastOffset: h.LastOffset(), LogAppendTime: lat,
		LogStartOffset: p.LogStartOffset()}, nil
}

// InvalidRecordError is INVALID_RECORD with Kafka's per-record detail
// (Produce v8+ record_errors): the batch indexes of the refused records.
type InvalidRecordError struct {
	Indexes []int32
	Reason  string // the message of each record error
	Msg     string // the partition-level message
}

func (e *InvalidRecordError) Error() string { return e.Msg }
func (e *InvalidRecordError) Unwrap() error { return kerr.InvalidRecord }

// checkKeys decodes batch and refuses it if a record has no key.
func (p *Partition) checkKeys(batch []byte) error {
	var bad []int32
	i := int32(0)
	err := records.Each(batch, func(r records.Record) {
		if r.Key == nil {
			bad = append(bad, i)
		}
		i++
	})
	if err != nil {
		return validationError(err)
	}
	if len(bad) == 0 {
		return nil
	}
	reason := fmt.Sprintf("Compacted topic cannot accept message without key in topic partition %s-%d.", p.topic, p.index)
	shown := make([]string, 0, 3)
	for _, b := range bad[:min(len(bad), 3)] {
		shown = append(shown, fmt.Sprintf("RecordError(batchIndex=%d, message='%s')", b, reason))
	}
	return &InvalidRecordError{Indexes: bad, Reason: reason,
		Msg: fmt.Sprintf("One or more records have been rejected due to %d record errors in total, and only showing the first three errors at most: [%s]", len(bad), strings.Join(shown, ", "))}
}

// validationError maps a records error onto the Kafka code for it; other
// errors come back unchanged.
func validationError(err error) error {
	switch {
	case errors.Is(err, records.ErrTooLarge):
		return fmt.Errorf("%w: %w", kerr.MessageTooLarge, err)
	case errors.Is(err, records.ErrUnsupportedMagic):
		return fmt.Errorf("%w: %w", kerr.UnsupportedForMessageFormat, err)
	case errors.Is(err, records.ErrCorrupt), errors.Is(err, records.ErrTruncated):
		return fmt.Errorf("%w: %w", kerr.CorruptMessage, err)
	}
	return err
}

// WaitCommitted returns when every offset below end is committed by the
// partition's Raft group: by a majority of its replicas, each fsynced under
// flush=sync (a single node's one replica: its own fsync). It fails if the
// log fails or ctx ends first.
func (p *Partition) WaitCommitted(ctx context.Context, end int64) error {
	if err := p.Failed(); err != nil {
		return err
	}
	return p.waitReplicated(ctx, end)
}

// advance raises the high watermark to hw and wakes long polls.
func (p *Partition) advance(hw int64) {
	p.hwMu.Lock()
	defer p.hwMu.Unlock()
	if hw <= p.hw || p.closed {
		return
	}
	if invariant.Enabled {
		// The watermark is Raft's commit offset, and Raft commits only
		// what this replica's log holds.
		end := p.log.EndOffset()
		invariant.Check(hw <= end, "partition %s-%d: high watermark %d past log end %d", p.topic, p.index, hw, end)
	}
	p.hw = hw
	p.wakeLocked()
}

// wakeLocked closes hwCh if a reader took it; hwMu held.
func (p *Partition) wakeLocked() {
	if p.hwCh != nil {
		close(p.hwCh)
		p.hwCh = nil
	}
}

// wakeReaders wakes what waits on Notify without moving the watermark.
func (p *Partition) wakeReaders() {
	p.hwMu.Lock()
	defer p.hwMu.Unlock()
	if p.closed {
		return
	}
	p.wakeLocked()
}

// HighWatermark is the end of what consumers may see.
func (p *Partition) HighWatermark() int64 {
	p.hwMu.Lock()
	defer p.hwMu.Unlock()
	return p.hw
}

// LogStartOffset is the first offset a client may read: the log's own
// start, or a later one that a committed log-start command named and whose
// segments are not deleted yet.
func (p *Partition) LogStartOffset() int64 { return max(p.log.StartOffset(), p.minStart.Load()) }
func (p *Partition) LogEndOffset() int64   { return p.log.EndOffset() }

func (p *Partition) DurableOffset() int64 { return p.log.DurableOffset() }

// OffsetForTimestamp is the first offset from the log start whose batch
// has a timestamp at or after ts, and that timestamp; -1 if none.
func (p *Partition) OffsetForTimestamp(ts int64) (offset, timestamp int64, err error) {
	return p.log.OffsetForTimestampFrom(ts, p.LogStartOffset())
}

// Notify returns a channel closed when the high watermark next advances,
// this node stops serving as the leader, or the partition closes. Take it
// before checking the watermark.
func (p *Partition) Notify() <-chan struct{} {
	p.hwMu.Lock()
	defer p.hwMu.Unlock()
	if p.closed {
		return closedCh
	}
	if p.hwCh == nil {
		p.hwCh = make(chan struct{})
	}
	return p.hwCh
}

// closedCh is what Notify returns for a closed partition.
var closedCh = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Read returns whole batches starting with the one holding offset, up to
// the high watermark (the last stable offset with readCommitted), at most
// maxBytes unless the first batch alone is larger (KIP-74). An offset
// between the high watermark and the log end reads nothing; outside
// [log start, log end] it is ErrOffsetOutOfRange.
func (p *Partition) Read(offset int64, maxBytes int, readCommitted bool) (ReadResult, error) {
	res, s, err := p.ReadFile(offset, maxBytes, readCommitted)
	if err != nil || s.Size == 0 {
		return res, err
	}
	defer s.Release()
	if res.Records, err = s.Bytes(); err != nil {
		return res, p.storageError(err)
	}
	return res, nil
}

// Scrub checks up to budget bytes of the log not checked yet
// (storage.Log.ScrubStep): how many it read, and whether more is left.
// Corrupt data stops the replica's group (storageError).
func (p *Partition) Scrub(budget int) (int, bool, error) {
	n, more, err := p.log.ScrubStep(budget)
	if err != nil {
		err = p.storageError(err)
	}
	return n, more, err
}

// storageError wraps a failed read in ErrStorage. Corrupt data
// (storage.ErrCorrupt) also stops this replica's Raft group where other
// replicas exist: a leader first hands its leadership to an in-sync
// follower (where the client goes next; raft.Host.FailCorrupt), and the
// replica manager rebuilds it from the others (replica/repair.go). An
// only replica goes on: writes and the rest of the log are served, the
// bad range answers an error.
func (p *Partition) storageError(err error) error {
	if errors.Is(err, storage.ErrCorrupt) && p.rep != nil && p.hasPeers() {
		_ = p.rep.host.FailCorrupt(p.rep.group, err)
	}
	return fmt.Errorf("%w: %w", ErrStorage, err)
}

// hasPeers reports whether the partition's group has a replica besides
// this one.
func (p *Partition) hasPeers() bool {
	st, err := p.rep.host.Status(p.rep.group)
	if err != nil {
		return true // failed or gone already: stopping it again is harmless
	}
	for _, id := range append(st.Voters, st.Learners...) {
		if id != st.Node {
			return true
		}
	}
	return false
}

// ReadFile is Read without the copy: the records stay in the segment file,
// as the byte range s for the server to send as it is (sendfile), and
// res.Records is nil. The caller must Release s (also when it is empty).
func (p *Partition) ReadFile(offset int64, maxBytes int, readCommitted bool) (res ReadResult, s storage.Slice, err error) {
	hw := p.HighWatermark()
	res = ReadResult{HighWatermark: hw, LastStableOffset: min(hw, p.LastStableOffset()), LogStartOffset: p.LogStartOffset()}
	limit := hw
	if readCommitted {
		limit = res.LastStableOffset
	}
	if offset < res.LogStartOffset || offset > p.log.EndOffset() {
		return res, s, ErrOffsetOutOfRange
	}
	if offset >= limit {
		return res, s, nil
	}
	if p.log.Config().Compact {
		res.Records, err = p.readCompacted(offset, limit, maxBytes, &res, readCommitted)
		return res, s, err
	}
	s, err = p.log.Read(offset, limit, maxBytes)
	if err == nil {
		// The range goes out as it is (sendfile): checked first, once
		// (storage/verify.go).
		if err = s.Verify(); err != nil {
			s.Release()
			s = storage.Slice{}
		}
	}
	if err != nil {
		if errors.Is(err, storage.ErrOffsetOutOfRange) {
			return res, s, ErrOffsetOutOfRange
		}
		return res, s, p.storageError(err)
	}
	if readCommitted && s.Size > 0 {
		p.trimAborted(res.LogStartOffset)
		res.Aborted = p.abortedIn(offset, s.LastOffset)
	}
	return res, s, nil
}

// maxEmptyScan bounds the bytes of empty batches one read of a compacted
// log skips before it returns the last of them as it is.
const maxEmptyScan = 16 << 20

// readCompacted is ReadFile on a compacted log: the batches are copied,
// without the empty ones the cleaner leaves (segmentio/kafka-go stops at
// an empty batch; every client steps over the gap instead). If the range
// read holds only empty batches it reads on, so a consumer always gets
// past them; after maxEmptyScan of them it returns the last one, which
// every client but kafka-go steps over.
func (p *Partition) readCompacted(offset, limit int64, maxBytes int, res *ReadResult, readCommitted bool) ([]byte, error) {
	var lastEmpty []byte
	scanned := 0
	for from := offset; from < limit; {
		s, err := p.log.Read(from, limit, maxBytes)
		if err != nil {
			if errors.Is(err, storage.ErrOffsetOutOfRange) {
				return nil, ErrOffsetOutOfRange
			}
			return nil, fmt.Errorf("%w: %w", ErrStorage, err)
		}
		if s.Size == 0 {
			s.Release()
			break
		}
		buf, err := s.Bytes()
		s.Release()
		if err != nil {
			return nil, p.storageError(err)
		}
		scanned += len(buf)
		kept, last, err := records.DropEmpty(buf)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStorage, err)
		}
		if len(kept) > 0 {
			if readCommitted {
				p.trimAborted(res.LogStartOffset)
				res.Aborted = p.abortedIn(offset, last)
			}
			return kept, nil
		}
		for rest := buf; len(rest) > 0; {
			if lastEmpty, rest, err = records.Next(rest); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrStorage, err)
			}
		}
		if scanned >= maxEmptyScan {
			return lastEmpty, nil
		}
		from = last + 1
	}
	return nil, nil
}

// Scan calls fn for every batch from offset on.
func (p *Partition) Scan(from int64, fn func(h records.Header, batch []byte) error) error {
	return p.log.Scan(from, fn)
}

// close stops the partition; with snapshot, it also saves the producer
// state so the next open does not rescan the log.
func (p *Partition) close(snapshot bool) error {
	p.hwMu.Lock()
	if !p.closed {
		p.closed = true
		p.wakeLocked() // wake long polls; they find the partition gone
	}
	p.hwMu.Unlock()
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	// What the state covers: on a follower, the log may hold entries past
	// it that are not committed yet; the next open scans those.
	end := p.stateEnd.Load()
	// No snapshot where it would hold nothing an open does not rebuild for
	// free (no producer, no transaction, no batch below end to scan): a
	// snapshot costs a file creation, two fsyncs and a rename, most of a
	// stop's time with 10,000 mostly empty partitions.
	snapshot = snapshot && !p.emptyStateBelow(end)
	err := p.log.Close()
	if snapshot && err == nil && p.Failed() == nil && !p.stateStale.Load() {
		if serr := p.writeSnapshot(end); serr != nil {
			p.logger().Warn("writing producer state snapshot", "err", serr)
		}
	}
	return err
}
