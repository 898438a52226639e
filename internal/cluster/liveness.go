package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/metadata"
)

// Broker liveness, as KRaft does it: every broker sends
// BrokerHeartbeat to the controller; the controller fences a broker it has
// not heard from for the session timeout by committing OpFence, and a later
// heartbeat commits OpUnfence. Who is fenced is therefore committed
// metadata, the same on every node - not each node's own guess at its
// peers' health (an earlier attempt that asked every node's transport
// disagreed between nodes and flapped). Fenced brokers are left out of
// Metadata and DescribeCluster and never named as a leader or coordinator.

const (
	DefaultHeartbeatInterval = 2 * time.Second // broker.heartbeat.interval.ms
	DefaultSessionTimeout    = 9 * time.Second // broker.session.timeout.ms
)

// liveness is one node's side of it: the heartbeat sender, and on the
// controller the sessions. Sessions are volatile: a new controller starts
// every broker with a full session rather than fencing on stale times.
type liveness struct {
	interval, session time.Duration
	now               func() time.Time // the node's clock

	mu       sync.Mutex
	term     uint64 // the controller term the sessions belong to
	since    time.Time
	lastSeen map[int32]time.Time
	// shutdown is set once this broker fenced itself to stop: it must
	// not unfence itself as controller or by heartbeat.
	shutdown bool

	hbAddr string      // where hb points
	hb     *kgo.Client // to the controller, for heartbeats (sender loop only)

	// The sender loop's own: since when this running broker has been
	// fenced (zero: it is not), and when it last handed its leaderships
	// off for it (handOffWhileFenced).
	fencedAt, handedOff time.Time
}

func (n *Node) startLiveness() {
	lv := &liveness{interval: n.cfg.BrokerHeartbeatInterval, session: n.cfg.BrokerSessionTimeout, now: n.clk.Now}
	if lv.interval <= 0 {
		lv.interval = DefaultHeartbeatInterval
	}
	if lv.session <= 0 {
		lv.session = DefaultSessionTimeout
	}
	n.live = lv
	n.goLoop(n.livenessLoop)
}

// sessions returns the session table of controller term term, starting a
// fresh one (everyone alive as of now) when the term changed. lv.mu held.
func (lv *liveness) sessions(term uint64) map[int32]time.Time {
	if term != lv.term || lv.lastSeen == nil {
		lv.term, lv.since, lv.lastSeen = term, lv.now(), map[int32]time.Time{}
	}
	return lv.lastSeen
}

func (n *Node) livenessLoop(stop <-chan struct{}) {
	lv := n.live
	// The first beat goes at once, not after an interval: a broker that
	// fenced itself to stop (or was fenced while down) restarts fenced,
	// and while it is, Metadata leaves it out and names no partition
	// leader on it - after a whole-cluster restart every partition
	// answered LEADER_NOT_AVAILABLE for the first interval (2 s), and
	// franz-go then waited out its metadata min age (5 s) before asking
	// again.
	wait := n.clk.After(0)
	for {
		select {
		case <-stop:
			return
		case <-wait:
		}
		lv.mu.Lock()
		shutdown := lv.shutdown
		lv.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), lv.interval+time.Second)
		var err error
		if l, lerr := n.host.Leadership(MetadataGroup); lerr == nil && l.Proposing {
			err = n.fenceExpired(ctx, l.Term)
		} else if !shutdown {
			err = n.heartbeat(ctx, false)
		}
		cancel()
		if err != nil {
			n.log.Debug("broker liveness", "err", err)
		}
		fenced := n.meta.Fenced(n.cfg.NodeID)
		n.handOffWhileFenced(fenced, shutdown)
		wait = n.clk.After(lv.next(shutdown, fenced))
	}
}

// fencedBeat is how often a broker that is fenced (and not stopping)
// beats until the controller unfences it - as a Kafka broker starting up
// heartbeats until it is unfenced - instead of once per interval: the
// controller is being elected, or a beat did not reach it yet. On the
// controller the same beat unfences itself.
const fencedBeat = 100 * time.Millisecond

// next is the wait before the next beat.
func (lv *liveness) next(shutdown, fenced bool) time.Duration {
	if fenced && !shutdown {
		return min(lv.interval, fencedBeat)
	}
	return lv.interval
}

// fenceExpired runs on the controller: it fences every registered broker
// whose session expired in this term, and unfences itself (the
// controller's own liveness is implicit).
func (n *Node) fenceExpired(ctx context.Context, term uint64) error {
	lv := n.live
	me := n.cfg.NodeID
	now := lv.now()
	var expired []int32
	lv.mu.Lock()
	seen := lv.sessions(term)
	shutdown := lv.shutdown
	for _, br := range n.meta.Brokers() {
		if br.ID == me || n.meta.Fenced(br.ID) {
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
	if n.meta.Fenced(me) && !shutdown {
		n.log.Info("controller unfencing itself")
		errs = append(errs, n.Propose(ctx, metadata.Command{Op: metadata.OpUnfence, IDs: []int32{me}}))
	}
	if len(expired) > 0 {
		n.log.Warn("fencing brokers: no heartbeat within the session timeout", "brokers", expired, "session_timeout", lv.session)
		errs = append(errs, n.Propose(ctx, metadata.Command{Op: metadata.OpFence, IDs: expired}))
	}
	return errors.Join(errs...)
}

// heartbeat sends one BrokerHeartbeat to the controller, straight to its
// registered address (the forwarder's routing comes from Metadata, which
// may leave out a controller that is still fenced).
func (n *Node) heartbeat(ctx context.Context, shutdown bool) error {
	lv := n.live
	ctrl := n.ControllerID()
	if ctrl < 0 {
		return errNoController
	}
	info, ok := n.meta.Broker(ctrl)
	if !ok {
		return errors.New("controller not registered yet")
	}
	addr, ok := n.BrokerAddr(info)
	if !ok {
		return errors.New("the controller has no inter-broker listener")
	}
	cl, err := lv.client(n, addr)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrBrokerHeartbeatRequest()
	req.BrokerID, req.BrokerEpoch = n.cfg.NodeID, 1
	req.CurrentMetadataOffset = n.meta.Applied()
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
func (lv *liveness) client(n *Node, addr string) (*kgo.Client, error) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.hb != nil && lv.hbAddr == addr {
		return lv.hb, nil
	}
	if lv.hb != nil {
		lv.hb.Close()
	}
	cl, err := n.cfg.Dial([]string{addr}, kgo.ClientID(n.ClientID()))
	if err != nil {
		lv.hb = nil
		return nil, err
	}
	lv.hb, lv.hbAddr = cl, addr
	return cl, nil
}

// Heartbeat is the controller's side of a BrokerHeartbeat from broker id:
// it renews the broker's session and, when fence differs from the
// broker's state, commits the change. It returns whether the broker is
// fenced afterwards; errors carry Kafka's code (NOT_CONTROLLER,
// INVALID_REQUEST, BROKER_ID_NOT_REGISTERED).
func (n *Node) Heartbeat(ctx context.Context, id int32, fence bool) (bool, error) {
	lv := n.live
	if lv == nil {
		return true, kerr.NotController
	}
	l, err := n.host.Leadership(MetadataGroup)
	if err != nil || !l.Proposing {
		return true, kerr.NotController
	}
	if _, ok := n.meta.Broker(id); !ok {
		// Any registered broker (the quorum and broker-only nodes alike);
		// an unknown one's registration loop is on it.
		return true, kerr.BrokerIDNotRegistered
	}
	lv.mu.Lock()
	if !fence {
		lv.sessions(l.Term)[id] = lv.now()
	}
	lv.mu.Unlock()
	if n.meta.Fenced(id) == fence {
		return fence, nil
	}
	op := metadata.OpUnfence
	if fence {
		op = metadata.OpFence
	}
	err = n.Propose(ctx, metadata.Command{Op: op, IDs: []int32{id}})
	if err == nil {
		n.log.Info("broker "+op+"d by heartbeat", "broker", id)
	}
	return n.meta.Fenced(id), err
}

// FenceForShutdown fences this broker at once, as Kafka's controlled
// shutdown does, so that clients stop being sent to it before its session
// would expire. It does nothing on a single node (nobody to send clients
// to instead). Call it before Close.
//
// An error that says the controller is stopping or gone wraps
// ErrControllerGone: the caller may log it quietly.
func (n *Node) FenceForShutdown(ctx context.Context) error {
	if n.live == nil || n.SingleNode() {
		return nil
	}
	n.live.mu.Lock()
	n.live.shutdown = true
	n.live.mu.Unlock()
	if n.IsController() {
		fence := metadata.Command{Op: metadata.OpFence, IDs: []int32{n.cfg.NodeID}}
		if others := slices.DeleteFunc(n.UnfencedBrokers(), func(br metadata.BrokerInfo) bool { return br.ID == n.cfg.NodeID }); len(others) == 0 {
			// Every other broker is fenced: stopping too, as when the
			// whole cluster stops. Fenced brokers that are still up must
			// not hand this one leaderships in their controlled shutdown,
			// so the fence is still worth proposing - but their quorum may
			// be gone already, and then the proposal would only wait out
			// ctx: it gets selfFenceWait (a whole quorum commits in
			// milliseconds).
			short, cancel := context.WithTimeout(ctx, selfFenceWait)
			defer cancel()
			err := n.Propose(short, fence)
			if err != nil && short.Err() != nil && ctx.Err() == nil {
				n.log.Info("not fenced before shutdown: every other broker is fenced and the metadata quorum did not commit in time", "wait", selfFenceWait)
				return nil
			}
			return err
		}
		return n.Propose(ctx, fence)
	}
	err := n.heartbeat(ctx, true)
	if err != nil && controllerGone(err) {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// franz-go's message for an EOF on a new connection guesses
			// at TLS or SASL; here it is the controller closing.
			err = errors.New("the controller closed the connection")
		}
		return fmt.Errorf("%w: %v", ErrControllerGone, err)
	}
	return err
}

// selfFenceWait bounds the controller's fence of itself when every other
// broker is fenced already (the whole cluster stopping).
const selfFenceWait = time.Second

// ErrControllerGone is FenceForShutdown's error when the controller could
// not be asked because it is stopping or has stopped: it closed or refused
// the connection, answered NOT_CONTROLLER (it handed the metadata group
// over as it stops), or no controller is known. Expected when the whole
// cluster stops together and the controller goes first; a later
// controller fences this broker when its session expires.
var ErrControllerGone = errors.New("the controller is stopping or has stopped")

var errNoController = errors.New("no controller known")

// controllerGone reports whether err, from a heartbeat, says the
// controller is stopping or gone rather than that it refused or failed
// the request.
func controllerGone(err error) bool {
	for _, gone := range []error{errNoController, io.EOF, io.ErrUnexpectedEOF, net.ErrClosed,
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, kerr.NotController} {
		if errors.Is(err, gone) {
			return true
		}
	}
	return false
}

// UnfencedBrokers are the registered brokers that are not fenced.
func (n *Node) UnfencedBrokers() []metadata.BrokerInfo {
	fenced := n.meta.FencedBrokers()
	return slices.DeleteFunc(n.meta.Brokers(), func(br metadata.BrokerInfo) bool { return slices.Contains(fenced, br.ID) })
}
