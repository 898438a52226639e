package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/group"
	"holdfast/internal/partition"
	"holdfast/internal/txn"
)

// txnState is the broker's part of transactions: the producer id allocator
// and the coordinator. The coordinator is built when __transaction_state
// exists: at start-up if it does, else at the first transactional
// InitProducerId (as Kafka creates the topic lazily), so brokers that never
// see a transaction never open its partitions.
type txnState struct {
	// blocks hands out ids from blocks the controller committed to this
	// broker (producerids.go).
	blocks *txn.BlockAllocator
	mu     sync.Mutex // serializes building the coordinator
	coord  atomic.Pointer[txn.Coordinator]
	// stopWatch stops the leadership watcher of the coordinator.
	stopWatch func()
}

func (b *Broker) startTxn() error {
	b.txn.blocks = txn.NewBlockAllocator(b.cluster.ReserveProducerIDs)
	b.closers = append(b.closers, func() error { b.txn.blocks.Close(); return nil })
	b.replicas.SetVerifier(b.verifyTxn)
	b.closers = append(b.closers, func() error {
		b.txn.mu.Lock()
		defer b.txn.mu.Unlock()
		if b.txn.stopWatch != nil {
			b.txn.stopWatch()
			b.txn.stopWatch = nil
		}
		if c := b.txn.coord.Swap(nil); c != nil {
			return c.Close()
		}
		return nil
	})
	_, err := b.txnCoordinator()
	return err
}

// coordinator returns the transaction coordinator if it has been built.
func (b *Broker) coordinator() *txn.Coordinator { return b.txn.coord.Load() }

// txnCoordinator returns the coordinator, creating __transaction_state and
// replaying it first if needed.
func (b *Broker) txnCoordinator() (*txn.Coordinator, error) {
	if c := b.txn.coord.Load(); c != nil {
		return c, nil
	}
	b.txn.mu.Lock()
	defer b.txn.mu.Unlock()
	if c := b.txn.coord.Load(); c != nil {
		return c, nil
	}
	n := b.cfg.Txn.StatePartitions
	if n <= 0 {
		n = txn.DefaultConfig().StatePartitions
	}
	// Built at start-up; the topic is created at the first
	// FindCoordinator (coordinators_cluster.go).
	c := b.newClusterTxnCoordinator(n)
	b.txn.coord.Store(c)
	return c, nil
}

// verifyTxn is the partitions' check of transactional appends: they are
// verified before the append, with the coordinator wherever it is
// (txnverify.go); reaching here means one was not.
func (b *Broker) verifyTxn(topic string, p int32, pid int64, epoch int16) error {
	return verifyTxnCluster(topic, p, pid, epoch)
}

// writeMarkers appends a transaction's markers to each of its partitions
// and waits until they are committed. A partition of __consumer_offsets
// also gets the group coordinator to apply or drop the pending offsets.
func (b *Broker) writeMarkers(ctx context.Context, pid int64, epoch int16, commit bool, parts []txn.TopicPartition) error {
	type wait struct {
		p   *partition.Partition
		end int64
	}
	var waits []wait
	for _, tp := range parts {
		p := b.replicas.Get(tp.Topic, tp.Partition)
		if p == nil {
			// Deleted since it joined the transaction: nothing to mark.
			b.log.Warn("transaction marker skipped: partition gone", "topic", tp.Topic, "partition", tp.Partition, "producer_id", pid)
			continue
		}
		offsets := tp.Topic == offsetsTopic
		if offsets {
			// The group's pending offsets must be known (replayed) before
			// the marker is applied to them.
			for b.groups != nil && !b.groups.Loaded(tp.Partition) {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
		end, err := p.AppendMarker(pid, epoch, commit, 0)
		if errors.Is(err, kerr.InvalidProducerEpoch) {
			// A newer epoch already wrote here, so this transaction was
			// closed long ago; the marker is stale.
			b.log.Warn("stale transaction marker skipped", "topic", tp.Topic, "partition", tp.Partition, "producer_id", pid, "err", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("marker to %s-%d: %w", tp.Topic, tp.Partition, err)
		}
		if offsets && b.groups != nil {
			b.groups.CompleteTxn(tp.Partition, pid, commit)
		}
		waits = append(waits, wait{p, end})
	}
	for _, w := range waits {
		if err := w.p.WaitCommitted(ctx, w.end); err != nil {
			return fmt.Errorf("marker to %s-%d: %w", w.p.Topic(), w.p.Index(), err)
		}
	}
	return nil
}

// AppendTxn implements group.TxnLog: a transactional offset commit.
func (l offsetsLog) AppendTxn(batch []byte) (int64, error) {
	res, err := l.p.AppendCoordinator(batch)
	if err != nil {
		return 0, err
	}
	return res.LastOffset + 1, nil
}

// offsetsPartition is the __consumer_offsets partition of group, or -1
// before the group coordinator runs.
func (b *Broker) offsetsPartition(g string) int32 {
	t, ok := b.meta.Topic(offsetsTopic)
	if !ok || t.Partitions <= 0 {
		return -1
	}
	return group.PartitionFor(g, int(t.Partitions))
}

// txnErrorCode is the Kafka code of a coordinator error.
func txnErrorCode(err error) int16 {
	var ke *kerr.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ke):
		return ke.Code
	}
	return kerr.CoordinatorNotAvailable.Code
}
