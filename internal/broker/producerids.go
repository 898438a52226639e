package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/controller"
	"holdfast/internal/txn"
	"holdfast/internal/wire"
)

// Producer ids. A single node counts them in a durable local file
// (txn.IDAllocator: a block's end is fsynced before any id of it is used).
// A cluster node gets blocks from the controller, committed through the
// metadata log before the node uses an id of them (Kafka's
// AllocateProducerIds, KIP-730): a restart or a wiped disk gets a new
// block, so no id is ever handed out twice - a repeated id would let one
// producer's sequence numbers pass for another's, and the idempotence
// check would answer new records as duplicates of ones never written.

// producerIDsFile is the single node's counter, under the data dir.
const producerIDsFile = "producer-ids"

func init() { registerInternal(kmsg.AllocateProducerIDs, 0, 0, (*Broker).handleAllocateProducerIDs) }

// clusterProducerID is InitProducerId for an idempotent producer in a
// cluster. A producer naming an id that some block covers and its epoch
// (KIP-360) keeps the id with the epoch bumped; otherwise it gets a new id.
func (b *Broker) clusterProducerID(ctx context.Context, req *kmsg.InitProducerIDRequest, resp *kmsg.InitProducerIDResponse) kmsg.Response {
	if req.ProducerID >= 0 && req.ProducerEpoch >= 0 && req.ProducerEpoch < math.MaxInt16-1 && b.meta.ProducerIDIssued(req.ProducerID) {
		resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch+1
		return resp
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	id, err := b.txn.blocks.Next(ctx)
	if err != nil {
		b.log.Warn("allocating a producer id", "err", err)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code // retriable: the controller may be electing
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp
}

// reserveProducerIDs gets this broker a block: proposed directly on the
// controller, asked of it with AllocateProducerIds elsewhere. It retries
// until ctx ends (controller elections, a controller not registered yet).
func (c *cluster) reserveProducerIDs(ctx context.Context) (int64, int64, error) {
	me := c.b.cfg.NodeID
	wait := 50 * time.Millisecond
	for {
		start, n, err := c.askProducerIDs(ctx, me)
		if err == nil {
			c.b.log.Info("producer id block reserved", "start", start, "len", n)
			return start, n, nil
		}
		c.b.log.Debug("reserving producer ids", "err", err)
		select {
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

func (c *cluster) askProducerIDs(ctx context.Context, me int32) (int64, int64, error) {
	if c.isController() {
		return c.allocateProducerIDs(ctx, me)
	}
	ctrl := c.controllerID()
	if ctrl < 0 {
		return 0, 0, errors.New("no controller known")
	}
	cl, err := c.forwarder()
	if err != nil {
		return 0, 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req := kmsg.NewPtrAllocateProducerIDsRequest()
	req.BrokerID, req.BrokerEpoch = me, 1
	resp, err := req.RequestWith(rctx, cl.Broker(int(ctrl)))
	if err != nil {
		return 0, 0, fmt.Errorf("asking the controller (node %d): %w", ctrl, err)
	}
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

// pidMu serializes block proposals on the controller: two at once would
// name the same start and one would be refused.
var pidMu sync.Mutex

// allocateProducerIDs commits a block to broker through the metadata log
// (this node must be the controller) and returns it once applied.
func (c *cluster) allocateProducerIDs(ctx context.Context, broker int32) (int64, int64, error) {
	pidMu.Lock()
	defer pidMu.Unlock()
	for range 5 {
		start := c.b.meta.ProducerIDBlockStart()
		err := c.propose(ctx, controller.Command{Op: controller.OpAllocateProducerIDs, BrokerID: broker,
			ProducerIDStart: start, ProducerIDLen: txn.IDBlock})
		if errors.Is(err, controller.ErrStaleProducerIDBlock) {
			continue // an earlier controller's block was applied meanwhile
		}
		if err != nil {
			return 0, 0, err
		}
		return start, txn.IDBlock, nil
	}
	return 0, 0, errCode(kerr.UnknownServerError, "producer id block proposals keep conflicting")
}

// handleAllocateProducerIDs (broker to controller) gives a registered
// broker a block of producer ids.
func (b *Broker) handleAllocateProducerIDs(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AllocateProducerIDsRequest)
	resp := req.ResponseKind().(*kmsg.AllocateProducerIDsResponse)
	c := b.cluster
	if code := c.controllerOnly(); code != 0 {
		resp.ErrorCode = code
		return wire.Respond(resp)
	}
	if _, ok := b.meta.Broker(req.BrokerID); !ok {
		resp.ErrorCode = kerr.BrokerIDNotRegistered.Code
		return wire.Respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		start, n, err := c.allocateProducerIDs(ctx, req.BrokerID)
		if err != nil {
			b.log.Warn("allocating producer ids", "broker", req.BrokerID, "err", err)
			resp.ErrorCode, _ = kafkaError(err)
			return resp
		}
		resp.ProducerIDStart, resp.ProducerIDLen = start, int32(n)
		return resp
	}
}
