package broker

import (
	"context"
	"math"
	"path/filepath"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/txn"
	"holdfast/internal/wire"
)

func init() {
	register(kmsg.InitProducerID, 0, 5, (*Broker).handleInitProducerID)
	onStart(rankCoordinator, "producer ids", func(b *Broker) error {
		a, err := txn.OpenIDAllocator(b.cfg.FS, filepath.Join(b.cfg.DataDir, "producer-ids"))
		if err != nil {
			return err
		}
		producerIDs.Store(b, a)
		b.closers = append(b.closers, func() error { producerIDs.Delete(b); return nil })
		return nil
	})
}

// producerIDs maps a Broker to its allocator. It lives here rather than in a
// Broker field to keep broker.go untouched while others edit it; it can
// move into the struct (with the transaction coordinator) in issue 5.
var producerIDs sync.Map // *Broker -> *txn.IDAllocator

// handleInitProducerID gives idempotent producers (no transactional id) a
// fresh producer id at epoch 0. With KIP-360 (v3+), a producer that names
// its current id and epoch - after UNKNOWN_PRODUCER_ID or a timed-out batch
// - gets the same id with the epoch bumped, which resets its sequences on
// every partition; a new id once the epoch is exhausted.
func (b *Broker) handleInitProducerID(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.InitProducerIDRequest)
	return func(context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		if req.TransactionalID != nil {
			if *req.TransactionalID == "" {
				resp.ErrorCode = kerr.InvalidRequest.Code
				return resp
			}
			// Transactions are issue 5. This code is one every client
			// treats as fatal and reports at once; a retriable one
			// (COORDINATOR_NOT_AVAILABLE) would make it retry until its
			// timeout and fail with a misleading message.
			b.log.Warn("transactional producer refused: transactions are not supported yet", "transactional_id", *req.TransactionalID)
			resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
			return resp
		}
		a, _ := producerIDs.Load(b)
		alloc, _ := a.(*txn.IDAllocator)
		if alloc == nil {
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
			return resp
		}
		if req.ProducerID >= 0 && req.ProducerEpoch >= 0 && alloc.Issued(req.ProducerID) && req.ProducerEpoch < math.MaxInt16-1 {
			resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch+1
			return resp
		}
		id, err := alloc.Next()
		if err != nil {
			b.log.Error("allocating a producer id", "err", err)
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code // retriable: the disk may recover
			return resp
		}
		resp.ProducerID, resp.ProducerEpoch = id, 0
		return resp
	}
}
