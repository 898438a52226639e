package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/kafkaerr"
	"holdfast/internal/metadata"
	"holdfast/internal/txn"
)

// Producer ids. A node gets blocks from the controller, committed through
// the metadata log before the node uses an id of them (Kafka's
// AllocateProducerIds, KIP-730): a restart or a wiped disk gets a new
// block, so no id is ever handed out twice - a repeated id would let one
// producer's sequence numbers pass for another's, and the idempotence
// check would answer new records as duplicates of ones never written.

// ReserveProducerIDs gets this broker a block: proposed directly on the
// controller, asked of it with AllocateProducerIds elsewhere. It retries
// until ctx ends (controller elections, a controller not registered yet).
func (n *Node) ReserveProducerIDs(ctx context.Context) (int64, int64, error) {
	me := n.cfg.NodeID
	wait := 50 * time.Millisecond
	for {
		start, count, err := n.askProducerIDs(ctx, me)
		if err == nil {
			n.log.Info("producer id block reserved", "start", start, "len", count)
			return start, count, nil
		}
		n.log.Debug("reserving producer ids", "err", err)
		select {
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-n.clk.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

func (n *Node) askProducerIDs(ctx context.Context, me int32) (int64, int64, error) {
	if n.IsController() {
		return n.AllocateProducerIDs(ctx, me)
	}
	ctrl := n.ControllerID()
	if ctrl < 0 {
		return 0, 0, errors.New("no controller known")
	}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req := kmsg.NewPtrAllocateProducerIDsRequest()
	req.BrokerID, req.BrokerEpoch = me, 1
	kresp, err := n.Send(rctx, ctrl, req)
	if err != nil {
		return 0, 0, fmt.Errorf("asking the controller (node %d): %w", ctrl, err)
	}
	resp := kresp.(*kmsg.AllocateProducerIDsResponse)
	if resp.ErrorCode != 0 {
		return 0, 0, fmt.Errorf("controller (node %d): %w", ctrl, kerr.ErrorForCode(resp.ErrorCode))
	}
	if resp.ProducerIDLen <= 0 || resp.ProducerIDStart < 0 {
		return 0, 0, fmt.Errorf("controller (node %d) gave an empty block", ctrl)
	}
	// The controller answers once the block is applied on it; this node's
	// metadata may lag, which only matters to ProducerIDIssued (a KIP-360
	// bump of an id from this block then gets a new id instead).
	return resp.ProducerIDStart, int64(resp.ProducerIDLen), nil
}

// AllocateProducerIDs commits a block to broker through the metadata log
// (this node must be the controller) and returns it once applied.
func (n *Node) AllocateProducerIDs(ctx context.Context, broker int32) (int64, int64, error) {
	if err := n.lockPIDs(ctx); err != nil {
		return 0, 0, err
	}
	defer n.unlockPIDs()
	for range 5 {
		start := n.meta.ProducerIDBlockStart()
		err := n.Propose(ctx, metadata.Command{Op: metadata.OpAllocateProducerIDs, BrokerID: broker,
			ProducerIDStart: start, ProducerIDLen: txn.IDBlock})
		if errors.Is(err, metadata.ErrStaleProducerIDBlock) {
			continue // an earlier controller's block was applied meanwhile
		}
		if err != nil {
			return 0, 0, err
		}
		return start, txn.IDBlock, nil
	}
	return 0, 0, kafkaerr.New(kerr.UnknownServerError, "producer id block proposals keep conflicting")
}

// SkipProducerIDsBelow commits a producer id floor: from then on no
// broker hands out an id below below, from a new block or from one it
// holds already, so that no new producer gets an id that producers of a
// topic restored from the object store have (their restored idempotence
// state would judge the new producer's batches). Ids handed out before
// are not taken back (docs/tiered-storage.md). On the controller only;
// elsewhere it does nothing (the topic's creation, which comes next, is
// refused there with NOT_CONTROLLER).
func (n *Node) SkipProducerIDsBelow(ctx context.Context, below int64) error {
	if !n.IsController() || below <= n.meta.ProducerIDFloor() {
		return nil
	}
	if err := n.lockPIDs(ctx); err != nil {
		return err
	}
	defer n.unlockPIDs()
	return n.Propose(ctx, metadata.Command{Op: metadata.OpAllocateProducerIDs, ProducerIDStart: below})
}

// ProducerIDFloor is the id below which this node hands out none.
func (n *Node) ProducerIDFloor() int64 { return n.meta.ProducerIDFloor() }

// lockPIDs takes pidLock, or gives up when ctx ends.
func (n *Node) lockPIDs(ctx context.Context) error {
	select {
	case n.pidLock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *Node) unlockPIDs() { <-n.pidLock }
