package partition

import (
	"encoding/binary"
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/records"
)

// Transactions as a partition sees them (KIP-98): a transactional producer's
// batches open a transaction here at their first offset; a control batch
// (the commit or abort marker the transaction coordinator writes) closes it.
// While a transaction is open the last stable offset (LSO) stays at its
// first offset, so read_committed consumers wait. An aborted transaction
// goes into the aborted index, which fetches hand to read_committed
// consumers so they skip its records.

// AbortedTxn is one entry of the aborted-transaction index: the records of
// ProducerID from FirstOffset up to the abort marker at LastOffset are to
// be skipped by read_committed consumers.
type AbortedTxn struct {
	ProducerID  int64 `json:"producer_id"`
	FirstOffset int64 `json:"first_offset"`
	LastOffset  int64 `json:"last_offset"` // the abort marker's offset
}

// Verifier decides whether a transactional batch of producerID at epoch may
// go to topic/partition: nil if the partition was added to the producer's
// ongoing transaction; otherwise the Kafka error (INVALID_TXN_STATE,
// PRODUCER_FENCED, ...): the last check of a batch the broker did not
// verify with the transaction coordinator beforehand (broker/txnverify.go);
// called with the partition's append lock held, so a marker cannot slip
// between the check and the append.
type Verifier func(topic string, partition int32, producerID int64, epoch int16) error

// ProducerInfo describes an active producer of a partition (DescribeProducers).
type ProducerInfo struct {
	ProducerID       int64
	Epoch            int16
	LastSequence     int32 // -1 if none known
	LastTimestamp    int64 // unix ms
	CurrentTxnOffset int64 // first offset of its open transaction, -1 if none
}

// txnState is guarded by Partition.txnMu (and changed only with appendMu
// held too, so appends see a stable view).
type txnState struct {
	open    map[int64]int64 // producer id -> first offset of its open transaction (putOpen)
	aborted []AbortedTxn    // by LastOffset
	// verified holds KIP-890 verifications by producer id: a guard taken
	// before asking the transaction coordinator, and whether it said the
	// partition is in the producer's transaction. A marker (or a rebuild)
	// drops the entry, so a verification that raced a marker no longer
	// admits a batch. Never persisted.
	verified map[int64]*verification
}

// putOpen records pid's open transaction; open is made by the first
// (nil until then: a partition without transactions holds no map).
func (t *txnState) putOpen(pid, first int64) {
	if t.open == nil {
		t.open = map[int64]int64{}
	}
	t.open[pid] = first
}

type verification struct {
	epoch int16
	guard uint64
	ok    bool
}

// markerRecord is the key and value of a transaction marker (Kafka's
// EndTransactionMarker: key version 0 + type, value version 0 + epoch).
func markerRecord(commit bool, coordinatorEpoch int32) (key, value []byte) {
	k := kmsg.NewControlRecordKey()
	k.Type = kmsg.ControlRecordKeyTypeAbort
	if commit {
		k.Type = kmsg.ControlRecordKeyTypeCommit
	}
	v := kmsg.NewEndTxnMarker()
	v.CoordinatorEpoch = coordinatorEpoch
	return k.AppendTo(nil), v.AppendTo(nil)
}

// markerType reads a control batch's type: commit, abort, or neither (other
// control records, which transactions ignore).
func markerType(batch []byte) (commit, isMarker bool, err error) {
	recs, err := records.Records(batch)
	if err != nil {
		return false, false, err
	}
	if len(recs) == 0 || len(recs[0].Key) < 4 {
		return false, false, nil
	}
	switch kmsg.ControlRecordKeyType(binary.BigEndian.Uint16(recs[0].Key[2:])) {
	case kmsg.ControlRecordKeyTypeCommit:
		return true, true, nil
	case kmsg.ControlRecordKeyTypeAbort:
		return false, true, nil
	}
	return false, false, nil
}

// SetVerifier installs the check for transactional appends on every
// partition of the manager; without one they get INVALID_TXN_STATE.
func (m *Manager) SetVerifier(v Verifier) {
	if v == nil {
		m.verify.Store(nil)
		return
	}
	m.verify.Store(&v)
}

// guardSeq numbers verification guards (process-wide, so a guard of one
// leadership term never matches an entry of another).
var guardSeq atomic.Uint64

// BeginTxnVerification starts KIP-890's check of a transactional batch of
// pid at epoch: needed is false when the partition already knows the batch
// belongs to an ongoing transaction (an open transaction of that epoch
// here, or an earlier positive verification not yet closed by a marker).
// Otherwise the caller asks the transaction coordinator and, if it says
// the partition is in the transaction, calls CompleteTxnVerification with
// guard before appending. A marker in between drops the guard, and the
// append is then refused (INVALID_TXN_STATE), as Kafka's VerificationGuard.
//
// In a cluster a new leader rebuilds its transaction state (dropping every
// verification) at its first append of the term; that happens here first,
// so the guard taken belongs to the rebuilt state. err is the append's
// error for a node that cannot append now (not the leader); nothing is
// then to be verified.
func (p *Partition) BeginTxnVerification(pid int64, epoch int16) (guard uint64, needed bool, err error) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if err := p.leaderCheckLocked(); err != nil {
		return 0, false, err
	}
	if p.txnAdmittedLocked(pid, epoch) {
		return 0, false, nil
	}
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	if v := p.txn.verified[pid]; v != nil && v.epoch == epoch {
		return v.guard, true, nil // another request is verifying it: share the guard
	}
	if p.txn.verified == nil {
		p.txn.verified = map[int64]*verification{}
	}
	v := &verification{epoch: epoch, guard: guardSeq.Add(1)}
	p.txn.verified[pid] = v
	return v.guard, true, nil
}

// CompleteTxnVerification records the coordinator's yes for the guard
// BeginTxnVerification returned; a guard dropped since (a marker came) is
// ignored.
func (p *Partition) CompleteTxnVerification(pid int64, guard uint64) {
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	if v := p.txn.verified[pid]; v != nil && v.guard == guard {
		v.ok = true
	}
}

// DropTxnVerification forgets a verification the coordinator refused, so
// refused producers leave nothing behind.
func (p *Partition) DropTxnVerification(pid int64, guard uint64) {
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	if v := p.txn.verified[pid]; v != nil && v.guard == guard && !v.ok {
		delete(p.txn.verified, pid)
	}
}

// txnAdmittedLocked reports whether a transactional batch of pid/epoch
// needs no (further) verification: its transaction is open here at that
// epoch, or was verified since the last marker. Called with appendMu held.
func (p *Partition) txnAdmittedLocked(pid int64, epoch int16) bool {
	e := p.producers[pid]
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	if _, open := p.txn.open[pid]; open && e != nil && e.epoch == epoch {
		return true
	}
	v := p.txn.verified[pid]
	return v != nil && v.ok && v.epoch == epoch
}

// noteTxnBatch records that a transactional data batch at base offset
// belongs to its producer's open transaction. Called with appendMu held,
// and while rebuilding from the log.
func (p *Partition) noteTxnBatch(pid, base int64) {
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	if _, ok := p.txn.open[pid]; !ok {
		p.txn.putOpen(pid, base)
	}
}

// noteMarker closes pid's open transaction by a marker at offset; an abort
// enters the aborted index. It returns whether a transaction was open.
func (p *Partition) noteMarker(pid int64, epoch int16, commit bool, offset int64) {
	p.txnMu.Lock()
	first, ok := p.txn.open[pid]
	delete(p.txn.open, pid)
	delete(p.txn.verified, pid)
	if ok && !commit {
		p.txn.aborted = append(p.txn.aborted, AbortedTxn{ProducerID: pid, FirstOffset: first, LastOffset: offset})
	}
	p.txnMu.Unlock()
	p.notePID(pid, epoch)
}

// notePID applies a marker's producer epoch: a newer one (the coordinator
// fenced the producer) means the old epoch's batches are refused from now
// on, and the new epoch starts its sequences afresh.
func (p *Partition) notePID(pid int64, epoch int16) {
	if e := p.producers[pid]; e != nil && epoch > e.epoch {
		e.epoch, e.batches = epoch, e.batches[:0]
	}
}

// AppendMarker writes a transaction marker for producerID (commit or
// abort) as a control batch and closes its transaction here. Only the
// transaction coordinator calls it. It returns the offset after the marker;
// wait for it with WaitCommitted.
func (p *Partition) AppendMarker(producerID int64, epoch int16, commit bool, coordinatorEpoch int32) (int64, error) {
	key, value := markerRecord(commit, coordinatorEpoch)
	batch, err := records.Build(records.Batch{
		ProducerID: producerID, ProducerEpoch: epoch, BaseSequence: -1,
		Transactional: true, Control: true, PartitionLeaderEpoch: p.epoch.Load(),
	}, []records.Record{{Timestamp: p.now().UnixMilli(), Key: key, Value: value}})
	if err != nil {
		return 0, err
	}
	v, err := records.Check(batch, 0)
	if err != nil {
		return 0, err
	}
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if err := p.Failed(); err != nil {
		return 0, err
	}
	if e := p.producers[producerID]; e != nil && epoch < e.epoch {
		return 0, fmt.Errorf("marker for producer %d epoch %d, current %d: %w", producerID, epoch, e.epoch, kerr.InvalidProducerEpoch)
	}
	info, err := p.appendLocked(&v)
	if err != nil {
		return 0, err
	}
	p.noteMarker(producerID, epoch, commit, info)
	return info + 1, nil
}

// AppendCoordinator appends a transactional batch that a coordinator wrote
// on a producer's behalf (TxnOffsetCommit into __consumer_offsets): it has
// no sequence, so there is nothing to deduplicate, but it opens the
// producer's transaction here like a produced batch would.
func (p *Partition) AppendCoordinator(batch []byte) (AppendResult, error) {
	v, err := records.Check(batch, p.log.Config().MaxMessageBytes)
	if err != nil {
		return AppendResult{}, validationError(err)
	}
	h := v.Header()
	if !h.IsTransactional() || h.IsControl() || h.ProducerID < 0 {
		return AppendResult{}, fmt.Errorf("coordinator batch must be transactional data: %w", kerr.InvalidRecord)
	}
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if err := p.Failed(); err != nil {
		return AppendResult{}, err
	}
	if e := p.producers[h.ProducerID]; e != nil && h.ProducerEpoch < e.epoch {
		return AppendResult{}, fmt.Errorf("producer %d epoch %d, current %d: %w", h.ProducerID, h.ProducerEpoch, e.epoch, kerr.ProducerFenced)
	}
	if !p.txnAdmittedLocked(h.ProducerID, h.ProducerEpoch) {
		// As for produced batches (Append): the transaction must be
		// known to include this partition, checked under the lock a
		// marker takes too.
		v := p.verify.Load()
		if v == nil {
			return AppendResult{}, fmt.Errorf("no transaction coordinator: %w", kerr.InvalidTxnState)
		}
		if err := (*v)(p.topic, p.index, h.ProducerID, h.ProducerEpoch); err != nil {
			return AppendResult{}, err
		}
	}
	base, err := p.appendLocked(&v)
	if err != nil {
		return AppendResult{}, err
	}
	p.noteTxnBatch(h.ProducerID, base)
	return AppendResult{BaseOffset: base, LastOffset: base + int64(h.LastOffsetDelta), LogAppendTime: -1,
		LogStartOffset: p.LogStartOffset()}, nil
}

// appendLocked writes a checked batch to the log through the partition's
// Raft group, once this node may (leaderCheckLocked), and returns its base
// offset.
func (p *Partition) appendLocked(v *records.Validated) (int64, error) {
	if err := p.leaderCheckLocked(); err != nil {
		return 0, err
	}
	return p.proposeLocked(v, nil)
}

// LastStableOffset is the offset below which every transaction is decided:
// the high watermark, or the first offset of the earliest open transaction
// if that is lower.
func (p *Partition) LastStableOffset() int64 {
	hw := p.HighWatermark()
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	for _, first := range p.txn.open {
		hw = min(hw, first)
	}
	return hw
}

// trimAborted forgets aborted transactions wholly below the log start
// (deleted by retention or DeleteRecords): no fetch can overlap them.
func (p *Partition) trimAborted(logStart int64) {
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	a := p.txn.aborted
	if i := sort.Search(len(a), func(i int) bool { return a[i].LastOffset >= logStart }); i > 0 {
		p.txn.aborted = append([]AbortedTxn(nil), a[i:]...)
	}
}

// abortedIn lists the aborted transactions overlapping offsets [from, to].
func (p *Partition) abortedIn(from, to int64) []AbortedTxn {
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	a := p.txn.aborted
	i := sort.Search(len(a), func(i int) bool { return a[i].LastOffset >= from })
	var out []AbortedTxn
	for ; i < len(a); i++ {
		if a[i].FirstOffset <= to {
			out = append(out, a[i])
		}
	}
	return out
}

// OpenTransactions returns the producers with an open transaction here and
// its first offset.
func (p *Partition) OpenTransactions() map[int64]int64 {
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	out := make(map[int64]int64, len(p.txn.open))
	for k, v := range p.txn.open {
		out[k] = v
	}
	return out
}

// Producers lists the partition's known idempotent and transactional
// producers.
func (p *Partition) Producers() []ProducerInfo {
	open := p.OpenTransactions()
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	out := make([]ProducerInfo, 0, len(p.producers))
	for id, e := range p.producers {
		pi := ProducerInfo{ProducerID: id, Epoch: e.epoch, LastSequence: -1, LastTimestamp: e.last, CurrentTxnOffset: -1}
		if n := len(e.batches); n > 0 {
			pi.LastSequence = e.batches[n-1].LastSeq
		}
		if first, ok := open[id]; ok {
			pi.CurrentTxnOffset = first
		}
		out = append(out, pi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ProducerID < out[j].ProducerID })
	return out
}

// replayTxn applies one batch read back from the log to the transaction
// state (at open).
func (p *Partition) replayTxn(h records.Header, batch []byte) error {
	if !h.IsTransactional() {
		return nil
	}
	if !h.IsControl() {
		// An empty batch is what the log cleaner left of a decided
		// transaction (it cleans only below the last stable offset): it
		// opens nothing, and its marker may be gone.
		if h.NumRecords > 0 {
			p.noteTxnBatch(h.ProducerID, h.BaseOffset)
		}
		return nil
	}
	if h.NumRecords == 0 {
		// A marker the cleaner removed after its delete horizon: it may
		// still be kept (empty) for the producer epoch it carries.
		p.notePID(h.ProducerID, h.ProducerEpoch)
		return nil
	}
	commit, ok, err := markerType(batch)
	if err != nil || !ok {
		return err
	}
	p.noteMarker(h.ProducerID, h.ProducerEpoch, commit, h.BaseOffset)
	return nil
}
