package broker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/controller"
	"holdfast/internal/wire"
)

// Broker liveness in cluster mode, as KRaft does it: every broker sends
// BrokerHeartbeat to the controller; the controller fences a broker it has
// not heard from for the session timeout by committing OpFence, and a later
// heartbeat commits OpUnfence. Who is fenced is therefore committed
// metadata, the same on every node - not each node's own guess at its
// peers' health (an earlier attempt that asked every node's transport
// disagreed between nodes and flapped). Fenced brokers are left out of
// Metadata and DescribeCluster and never named as a leader or coordinator.

const (
	defaultHeartbeatInterval = 2 * time.Second // broker.heartbeat.interval.ms
	defaultSessionTimeout    = 9 * time.Second // broker.session.timeout.ms
)

func init() {
	onStart(rankStorage+7, "broker liveness", (*Broker).startLiveness)
	registerInternal(kmsg.BrokerHeartbeat, 0, 2, (*Broker).handleBrokerHeartbeat)
}

// liveness is one node's side of it: the heartbeat sender, and on the
// controller the sessions. Sessions are volatile: a new controller starts
// every broker with a full session rather than fencing on stale times.
type liveness struct {
	interval, session time.Duration

	mu       sync.Mutex
	term     uint64 // the controller term the sessions belong to
	since    time.Time
	lastSeen map[int32]time.Time
	// shutdown is set once this broker fenced itself to stop: it must
	// not unfence itself as controller or by heartbeat.
	shutdown bool

	hbAddr string      // where hb points
	hb     *kgo.Client // to the controller, for heartbeats (sender loop only)
}

func (b *Broker) startLiveness() error {
	c := b.cluster
	if c == nil {
		return nil
	}
	lv := &liveness{interval: b.cfg.BrokerHeartbeatInterval, session: b.cfg.BrokerSessionTimeout}
	if lv.interval <= 0 {
		lv.interval = defaultHeartbeatInterval
	}
	if lv.session <= 0 {
		lv.session = defaultSessionTimeout
	}
	c.live = lv
	stop := goLoop(c.livenessLoop)
	b.closers = append(b.closers, func() error {
		stop()
		if lv.hb != nil {
			lv.hb.Close()
		}
		return nil
	})
	return nil
}

// sessions returns the session table of controller term term, starting a
// fresh one (everyone alive as of now) when the term changed. lv.mu held.
func (lv *liveness) sessions(term uint64) map[int32]time.Time {
	if term != lv.term || lv.lastSeen == nil {
		lv.term, lv.since, lv.lastSeen = term, time.Now(), map[int32]time.Time{}
	}
	return lv.lastSeen
}

func (c *cluster) livenessLoop(stop <-chan struct{}) {
	lv := c.live
	tick := time.NewTicker(lv.interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		lv.mu.Lock()
		shutdown := lv.shutdown
		lv.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), lv.interval+time.Second)
		var err error
		if l, lerr := c.host.Leadership(metadataGroup); lerr == nil && l.Proposing {
			err = c.fenceExpired(ctx, l.Term)
		} else if !shutdown {
			err = c.heartbeat(ctx, false)
		}
		cancel()
		if err != nil {
			c.b.log.Debug("broker liveness", "err", err)
		}
	}
}

// fenceExpired runs on the controller: it fences every registered broker
// whose session expired in this term, and unfences itself (the
// controller's own liveness is implicit).
func (c *cluster) fenceExpired(ctx context.Context, term uint64) error {
	b, lv := c.b, c.live
	me := b.cfg.NodeID
	now := time.Now()
	var expired []int32
	lv.mu.Lock()
	seen := lv.sessions(term)
	shutdown := lv.shutdown
	for _, br := range b.meta.Brokers() {
		if br.ID == me || b.meta.Fenced(br.ID) {
			continue
		}
		last, ok := seen[br.ID]
		if !ok {
			last = lv.since
		}
		if now.Sub(last) > lv.session {
			expired = append(expired, br.ID)
		}
	}
	lv.mu.Unlock()
	var errs []error
	if b.meta.Fenced(me) && !shutdown {
		b.log.Info("controller unfencing itself")
		errs = append(errs, c.propose(ctx, controller.Command{Op: controller.OpUnfence, IDs: []int32{me}}))
	}
	if len(expired) > 0 {
		b.log.Warn("fencing brokers: no heartbeat within the session timeout", "brokers", expired, "session_timeout", lv.session)
		errs = append(errs, c.propose(ctx, controller.Command{Op: controller.OpFence, IDs: expired}))
	}
	return errors.Join(errs...)
}

// heartbeat sends one BrokerHeartbeat to the controller, straight to its
// registered address (the forwarder's routing comes from Metadata, which
// may leave out a controller that is still fenced).
func (c *cluster) heartbeat(ctx context.Context, shutdown bool) error {
	b, lv := c.b, c.live
	ctrl := c.controllerID()
	if ctrl < 0 {
		return errors.New("no controller known")
	}
	info, ok := b.meta.Broker(ctrl)
	if !ok {
		return errors.New("controller not registered yet")
	}
	addr, ok := b.brokerAddr(info)
	if !ok {
		return errors.New("the controller has no inter-broker listener")
	}
	cl, err := lv.client(b, addr)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrBrokerHeartbeatRequest()
	req.BrokerID, req.BrokerEpoch = b.cfg.NodeID, 1
	req.CurrentMetadataOffset = b.meta.Applied()
	req.WantShutdown = shutdown
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil {
		return err
	}
	if resp.ErrorCode != 0 {
		return kerr.ErrorForCode(resp.ErrorCode)
	}
	return nil
}

// client is the heartbeat connection to addr, made anew when the
// controller moves (the loop and FenceForShutdown may race: lv.mu).
func (lv *liveness) client(b *Broker, addr string) (*kgo.Client, error) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.hb != nil && lv.hbAddr == addr {
		return lv.hb, nil
	}
	if lv.hb != nil {
		lv.hb.Close()
	}
	cl, err := b.nodeClient([]string{addr}, kgo.ClientID(b.brokerClientID()))
	if err != nil {
		lv.hb = nil
		return nil, err
	}
	lv.hb, lv.hbAddr = cl, addr
	return cl, nil
}

func (b *Broker) registered(id int32) bool {
	_, ok := b.meta.Broker(id)
	return ok
}

// FenceForShutdown fences this broker at once, as Kafka's controlled
// shutdown does, so that clients stop being sent to it before its session
// would expire. It does nothing on a single node. Call it before Close.
func (b *Broker) FenceForShutdown(ctx context.Context) error {
	c := b.cluster
	if c == nil || c.live == nil {
		return nil
	}
	c.live.mu.Lock()
	c.live.shutdown = true
	c.live.mu.Unlock()
	if c.isController() {
		return c.propose(ctx, controller.Command{Op: controller.OpFence, IDs: []int32{b.cfg.NodeID}})
	}
	return c.heartbeat(ctx, true)
}

// handleBrokerHeartbeat (KRaft's broker-to-controller API) renews a
// broker's session; only the controller takes it. The first heartbeat of
// a fenced broker unfences it; WantFence / WantShutdown fence it.
func (b *Broker) handleBrokerHeartbeat(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.BrokerHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.BrokerHeartbeatResponse)
	resp.IsFenced = true
	c := b.cluster
	if c == nil || c.live == nil {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		return wire.Respond(resp)
	}
	l, err := c.host.Leadership(metadataGroup)
	switch {
	case err != nil || !l.Proposing:
		resp.ErrorCode = kerr.NotController.Code
		return wire.Respond(resp)
	case !b.registered(req.BrokerID):
		// Any registered broker: the controller quorum (--peers) and
		// broker-only nodes alike.
		resp.ErrorCode = kerr.InvalidRequest.Code
		return wire.Respond(resp)
	}
	if _, ok := b.meta.Broker(req.BrokerID); !ok {
		// Its registration loop is on it.
		resp.ErrorCode = kerr.BrokerIDNotRegistered.Code
		return wire.Respond(resp)
	}
	fence := req.WantFence || req.WantShutdown
	resp.ShouldShutdown = req.WantShutdown
	lv := c.live
	lv.mu.Lock()
	if !fence {
		lv.sessions(l.Term)[req.BrokerID] = time.Now()
	}
	lv.mu.Unlock()
	if b.meta.Fenced(req.BrokerID) == fence {
		resp.IsFenced = fence
		return wire.Respond(resp)
	}
	op := controller.OpUnfence
	if fence {
		op = controller.OpFence
	}
	return func(ctx context.Context) kmsg.Response {
		err := c.propose(ctx, controller.Command{Op: op, IDs: []int32{req.BrokerID}})
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			b.log.Info("broker "+op+"d by heartbeat", "broker", req.BrokerID, "shutdown", req.WantShutdown)
		}
		resp.ErrorCode, _ = kafkaError(err)
		resp.IsFenced = b.meta.Fenced(req.BrokerID)
		return resp
	}
}

// fenced reports whether broker id is fenced (always false on a single
// node, which has no sessions).
func (b *Broker) fenced(id int32) bool {
	return b.cluster != nil && b.meta.Fenced(id)
}

// unfencedBrokers are the registered brokers that are not fenced.
func (b *Broker) unfencedBrokers() []controller.BrokerInfo {
	fenced := b.meta.FencedBrokers()
	return slices.DeleteFunc(b.meta.Brokers(), func(br controller.BrokerInfo) bool { return slices.Contains(fenced, br.ID) })
}
