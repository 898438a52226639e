package coordinator

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/partition"
	"holdfast/internal/records"
)

// internalLog is partition index of an internal topic as the coordinators
// see it (group.Log, group.TxnLog, txn.Log). The replica is looked up at
// each use: it opens when the topic's creation is applied here, which may
// be after the coordinator is built.
type internalLog struct {
	h     *Host
	topic string
	index int32
}

func (l internalLog) replica() (*partition.Partition, error) {
	p := l.h.replicas.Get(l.topic, l.index)
	if p == nil {
		return nil, fmt.Errorf("%s-%d has no replica here: %w", l.topic, l.index, kerr.NotCoordinator)
	}
	return p, nil
}

// Append appends a coordinator's batch and returns the end offset it must
// wait for.
func (l internalLog) Append(batch []byte) (int64, error) {
	p, err := l.replica()
	if err != nil {
		return 0, err
	}
	res, err := p.Append(batch)
	if err != nil {
		return 0, err
	}
	return res.LastOffset + 1, nil
}

// AppendTxn appends a transactional offset commit (group.TxnLog).
func (l internalLog) AppendTxn(batch []byte) (int64, error) {
	p, err := l.replica()
	if err != nil {
		return 0, err
	}
	res, err := p.AppendCoordinator(batch)
	if err != nil {
		return 0, err
	}
	return res.LastOffset + 1, nil
}

func (l internalLog) WaitCommitted(ctx context.Context, end int64) error {
	p, err := l.replica()
	if err != nil {
		return err
	}
	return p.WaitCommitted(ctx, end)
}

// Scan replays the partition from its log start.
func (l internalLog) Scan(fn func(batch []byte) error) error {
	p, err := l.replica()
	if err != nil {
		return err
	}
	return p.Scan(p.LogStartOffset(), func(_ records.Header, batch []byte) error { return fn(batch) })
}
