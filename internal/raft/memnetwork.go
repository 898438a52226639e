package raft

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/bufref"
	"holdfast/internal/clock"
)

// MemNetwork is an in-memory network between the Raft hosts of one
// process (Config.Network), for in-process clusters that run their hosts'
// own goroutines: the whole-node simulation (internal/brokertest) and
// tests. It replaces the TCP transport, never runs beside it: a host with
// a Network opens no socket.
//
// Whether a message is lost, and how late it arrives, is drawn from one
// random source seeded by the caller; links are cut, made lossy or slow
// per direction (UpdateLink, Cut, Isolate) and healed (HealAll). What it
// models of TCP: per link, messages arrive in the order sent; a message
// on a cut or lossy link, or to a node that is not running, is dropped and
// its sender told (ReportUnreachable, a failed snapshot), later and from
// another goroutine, as a failed connection is; one that finds its link's
// queue full is dropped and told only if it is an append or a snapshot,
// as by the TCP sender: a slow peer is not an unreachable one; every node sends each of
// its peers a node heartbeat every heartbeat interval (the TCP sender's
// empty frame: it carries the node's identity, and wakes quiesced groups
// when a node goes silent); frames of another cluster are refused.
//
// Unlike the Raft simulation's network (memnet_test.go), which the
// harness steps message by message on one goroutine, delivery here runs
// on one goroutine per link and the timers of the time package: inside a
// testing/synctest bubble those are the bubble's fake clock, so delays
// take no wall time, but which of two runnable goroutines goes first is
// still Go's scheduler's choice, and so is the order the random source is
// drawn in.
type MemNetwork struct {
	mu       sync.Mutex
	rng      *rand.Rand
	eps      map[uint64]*memNetEndpoint // the running incarnation of each node
	links    map[[2]uint64]LinkFaults
	isolated map[uint64]bool

	sent, delivered, dropped atomic.Int64
}

// LinkFaults is what is wrong with the link from one node to another.
type LinkFaults struct {
	Cut   bool          // every message is dropped
	Loss  float64       // each message is lost with this probability
	Delay time.Duration // each message arrives up to this late (order kept)
}

// MemNetworkStats counts a MemNetwork's messages (node heartbeats
// included).
type MemNetworkStats struct {
	Sent, Delivered, Dropped int64
}

// NewMemNetwork returns a network with every link healthy, whose losses
// and delays are drawn from seed.
func NewMemNetwork(seed uint64) *MemNetwork {
	return &MemNetwork{
		rng: rand.New(rand.NewPCG(seed, seed^0x6d656d6e6574)), eps: map[uint64]*memNetEndpoint{},
		links: map[[2]uint64]LinkFaults{}, isolated: map[uint64]bool{},
	}
}

// UpdateLink changes what is wrong with the link from one node to another
// (fn sets the faults; all zero heals it).
func (n *MemNetwork) UpdateLink(from, to uint64, fn func(*LinkFaults)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := [2]uint64{from, to}
	f := n.links[k]
	fn(&f)
	if f == (LinkFaults{}) {
		delete(n.links, k)
		return
	}
	n.links[k] = f
}

// Cut drops every message between a and b, both ways.
func (n *MemNetwork) Cut(a, b uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, k := range [][2]uint64{{a, b}, {b, a}} {
		f := n.links[k]
		f.Cut = true
		n.links[k] = f
	}
}

// Isolate cuts node id off from every other node, also those that attach
// later, until HealAll: a network partition with id alone on its side.
func (n *MemNetwork) Isolate(id uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.isolated[id] = true
}

// Rejoin ends node id's isolation (Isolate); what else is wrong with its
// links stays.
func (n *MemNetwork) Rejoin(id uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.isolated, id)
}

// HealAll restores every link.
func (n *MemNetwork) HealAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.links)
	clear(n.isolated)
}

// Stats returns the network's counters.
func (n *MemNetwork) Stats() MemNetworkStats {
	return MemNetworkStats{Sent: n.sent.Load(), Delivered: n.delivered.Load(), Dropped: n.dropped.Load()}
}

// fate draws what happens to a message from one node to another sent now:
// lost, or delivered after delay.
func (n *MemNetwork) fate(from, to uint64) (lost bool, delay time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.isolated[from] != n.isolated[to] {
		return true, 0
	}
	f, ok := n.links[[2]uint64{from, to}]
	if !ok {
		return false, 0
	}
	if f.Cut || f.Loss > 0 && n.rng.Float64() < f.Loss {
		return true, 0
	}
	if f.Delay > 0 {
		delay = time.Duration(n.rng.Int64N(int64(f.Delay) + 1))
	}
	return false, delay
}

// cut reports whether the link is cut now (a message sent before a cut
// and delivered after it is dropped, as by TCP).
func (n *MemNetwork) cut(from, to uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.isolated[from] != n.isolated[to] || n.links[[2]uint64{from, to}].Cut
}

// attach connects a new incarnation of node id (its host starting); it
// replaces the one before, which no longer receives anything.
func (n *MemNetwork) attach(id uint64, listen string, ident NodeIdentity, ev transportEvents, queueLen int, heartbeat time.Duration) *memNetEndpoint {
	ep := &memNetEndpoint{
		net: n, id: id, listen: listen, ev: ev, queueLen: queueLen, heartbeat: heartbeat,
		clk: clock.Real(), links: map[uint64]*memNetLink{}, addrs: map[uint64]string{},
		lastHeard: map[uint64]time.Time{}, peerIdent: map[uint64]PeerIdentity{}, done: make(chan struct{}),
	}
	ep.setIdentity(ident)
	n.mu.Lock()
	n.eps[id] = ep
	n.mu.Unlock()
	return ep
}

func (n *MemNetwork) endpoint(id uint64) *memNetEndpoint {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.eps[id]
}

// memNetEndpoint is one node incarnation's transport on a MemNetwork.
type memNetEndpoint struct {
	net       *MemNetwork
	id        uint64
	listen    string
	ev        transportEvents
	queueLen  int
	heartbeat time.Duration
	clk       clock.Clock // the host's: delays and heartbeats
	ident     atomic.Pointer[NodeIdentity]

	mu        sync.Mutex
	links     map[uint64]*memNetLink // by peer: the sending side
	addrs     map[uint64]string
	lastHeard map[uint64]time.Time
	peerIdent map[uint64]PeerIdentity
	closed    bool
	done      chan struct{}
	wg        sync.WaitGroup

	// recv is held (read) while a delivery to this endpoint runs, and
	// taken by close: once closed, nothing reaches the host.
	recv        sync.RWMutex
	recvClosed  bool
	sentN, drop atomic.Int64
}

// memNetLink is the queue of one endpoint's messages to one peer, and the
// goroutine that delivers them in order.
type memNetLink struct {
	to uint64
	q  chan memNetMsg
}

// memNetMsg is one message on a link; data nil is a node heartbeat.
type memNetMsg struct {
	group uint64
	typ   pb.MessageType
	data  []byte
	due   time.Time
}

// newMemNetTransport is a host's transport on network n.
func newMemNetTransport(n *MemNetwork, cfg Config, ev transportEvents) *memNetEndpoint {
	ep := n.attach(cfg.ID, cfg.Listen, cfg.Identity, ev, cfg.QueueLen, cfg.TickInterval*time.Duration(cfg.HeartbeatTicks))
	ep.clk = clock.OrReal(cfg.Clock)
	return ep
}

func (ep *memNetEndpoint) addr() string { return ep.listen }

// addPeer starts the link to a peer (its address only names it).
func (ep *memNetEndpoint) addPeer(id uint64, addr string) {
	if id == ep.id {
		return
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.addrs[id] = addr
	if ep.closed || ep.links[id] != nil {
		return
	}
	l := &memNetLink{to: id, q: make(chan memNetMsg, ep.queueLen)}
	ep.links[id] = l
	ep.wg.Add(1)
	go ep.sender(l)
}

func (ep *memNetEndpoint) peerAddr(id uint64) (string, bool) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	a, ok := ep.addrs[id]
	return a, ok
}

func (ep *memNetEndpoint) send(group uint64, m *pb.Message) { ep.sendHeld(group, m, nil) }

// sendHeld marshals m at once (what the host changes later is not sent),
// so the buffers are free after it.
func (ep *memNetEndpoint) sendHeld(group uint64, m *pb.Message, refs []*bufref.Ref) {
	b, err := proto.Marshal(m)
	releaseRefs(refs)
	if err != nil {
		panic(fmt.Sprintf("raft: memnetwork: %v", err)) // a message the host made
	}
	to := m.GetTo()
	ep.mu.Lock()
	l, closed := ep.links[to], ep.closed
	ep.mu.Unlock()
	if closed {
		return
	}
	ep.sentN.Add(1)
	ep.net.sent.Add(1)
	msg := memNetMsg{group: group, typ: m.GetType(), data: b}
	full := false
	if l != nil {
		lost, delay := ep.net.fate(ep.id, to)
		if !lost {
			msg.due = ep.clk.Now().Add(delay)
			select {
			case l.q <- msg:
				return
			default: // the queue is full: dropped, as by the TCP sender
				full = true
			}
		}
	}
	// Reported from another goroutine: send may run under the group's
	// lock, and unreachable takes it.
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return // close waits for the goroutines it knows of
	}
	ep.wg.Add(1)
	go func() {
		defer ep.wg.Done()
		if full {
			ep.backPressure(to, msg)
			return
		}
		ep.failed(to, msg)
	}()
}

// backPressure drops a message its link's full queue had no room for:
// the peer is slow, not unreachable (as the TCP sender, transport.go's
// peer), so only a snapshot's failure and a dropped append (flow
// control: its leader probes) are reported.
func (ep *memNetEndpoint) backPressure(to uint64, m memNetMsg) {
	ep.drop.Add(1)
	ep.net.dropped.Add(1)
	if ep.isClosed() {
		return
	}
	switch m.typ {
	case pb.MessageType_MsgSnap:
		ep.ev.snapshotSent(to, m.group, false)
	case pb.MessageType_MsgApp:
		ep.ev.unreachable(to, []uint64{m.group})
	}
}

// failed reports a message that was not delivered to its sender's host.
func (ep *memNetEndpoint) failed(to uint64, m memNetMsg) {
	ep.drop.Add(1)
	ep.net.dropped.Add(1)
	if m.data == nil || ep.isClosed() {
		return
	}
	ep.ev.unreachable(to, []uint64{m.group})
	if m.typ == pb.MessageType_MsgSnap {
		ep.ev.snapshotSent(to, m.group, false)
	}
}

func (ep *memNetEndpoint) isClosed() bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.closed
}

// sender delivers one link's messages in order, each once it is due, and
// a node heartbeat every heartbeat interval.
func (ep *memNetEndpoint) sender(l *memNetLink) {
	defer ep.wg.Done()
	hb := ep.clk.NewTicker(ep.heartbeat)
	defer hb.Stop()
	for {
		var m memNetMsg
		select {
		case <-ep.done:
			return
		case m = <-l.q:
		case <-hb.C:
			if ep.net.cut(ep.id, l.to) {
				continue
			}
		}
		if d := m.due.Sub(ep.clk.Now()); m.data != nil && d > 0 {
			t := ep.clk.NewTimer(d)
			select {
			case <-ep.done:
				t.Stop()
				return
			case <-t.C:
			}
		}
		ep.deliver(l.to, m)
	}
}

// deliver hands one message to the running incarnation of node to.
func (ep *memNetEndpoint) deliver(to uint64, m memNetMsg) {
	dst := ep.net.endpoint(to)
	if dst == nil || ep.net.cut(ep.id, to) {
		ep.failed(to, m)
		return
	}
	dst.recv.RLock()
	defer dst.recv.RUnlock()
	if dst.recvClosed {
		ep.failed(to, m)
		return
	}
	ok, err := dst.receive(ep, m)
	if err != nil {
		panic(fmt.Sprintf("raft: memnetwork: %v", err)) // we marshaled it
	}
	if !ok {
		ep.failed(to, m)
		return
	}
	ep.net.delivered.Add(1)
	if m.typ == pb.MessageType_MsgSnap && !ep.isClosed() {
		ep.ev.snapshotSent(to, m.group, true)
	}
}

// receive takes a message from src, as the TCP reader takes a frame: a
// heartbeat records src's identity; a node of another cluster is refused,
// and one without a cluster yet exchanges identities only.
func (dst *memNetEndpoint) receive(src *memNetEndpoint, m memNetMsg) (bool, error) {
	theirs, mine := src.ident.Load(), dst.ident.Load()
	now := dst.clk.Now()
	if m.data == nil {
		dst.mu.Lock()
		dst.peerIdent[src.id] = PeerIdentity{NodeIdentity: *theirs, Seen: now}
		dst.mu.Unlock()
	}
	switch {
	case theirs.Cluster == mine.Cluster:
	case theirs.Cluster != [16]byte{} && mine.Cluster != [16]byte{}:
		return false, nil // another cluster's node
	default:
		return m.data == nil, nil // identities only
	}
	dst.mu.Lock()
	dst.lastHeard[src.id] = now
	dst.mu.Unlock()
	if m.data == nil {
		return true, nil
	}
	msg := &pb.Message{}
	if err := proto.Unmarshal(m.data, msg); err != nil {
		return false, err
	}
	dst.ev.receive(src.id, []outMsg{{group: m.group, m: msg}})
	return true, nil
}

func (ep *memNetEndpoint) setIdentity(id NodeIdentity) {
	id.Bootstrap = maps.Clone(id.Bootstrap)
	ep.ident.Store(&id)
}

func (ep *memNetEndpoint) identities() map[uint64]PeerIdentity {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return maps.Clone(ep.peerIdent)
}

func (ep *memNetEndpoint) heardWithin(peer uint64, d time.Duration) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	t, ok := ep.lastHeard[peer]
	return ok && ep.clk.Now().Sub(t) < d
}

func (ep *memNetEndpoint) heardAllWithin(d time.Duration) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	for _, t := range ep.lastHeard {
		if ep.clk.Now().Sub(t) >= d {
			return false
		}
	}
	return true
}

func (ep *memNetEndpoint) stats() TransportStats {
	return TransportStats{MessagesSent: ep.sentN.Load(), Dropped: ep.drop.Load()}
}

// close: the node is gone. Its links stop (what they still held is lost,
// as a closed socket's buffers are); what is sent to it is dropped; a
// delivery to it under way finishes first.
func (ep *memNetEndpoint) close() {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return
	}
	ep.closed = true
	close(ep.done)
	ep.mu.Unlock()
	ep.recv.Lock()
	ep.recvClosed = true
	ep.recv.Unlock()
	ep.net.mu.Lock()
	if ep.net.eps[ep.id] == ep {
		delete(ep.net.eps, ep.id)
	}
	ep.net.mu.Unlock()
	ep.wg.Wait()
}
