package raft

import (
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/bufref"
)

// memNet is an in-memory network between stepped hosts (the simulation's
// transport). Nothing moves on its own: a sent message waits in flight
// until the harness delivers it, and the harness decides, with the
// simulation's one random source, which message goes next, which are lost,
// late or delivered twice, and which links are cut. Time is the harness's
// tick count.
//
// What it models of TCP: per link, messages arrive in the order sent
// unless the link reorders (a reconnect can do that); a message on a cut
// or lossy link is dropped and its sender told (ReportUnreachable, a
// failed snapshot), as a failed connection is; a message to a stopped node
// is dropped the same way; a paused node (SIGSTOP) receives nothing until
// it resumes, and its messages then arrive late. Every node sends every
// peer a node heartbeat each tick (the TCP sender's empty frame), which is
// what wakes quiesced groups when a node goes silent.
type memNet struct {
	rng  *rand.Rand
	now  int64 // ticks
	tick time.Duration

	eps       map[uint64]*memEndpoint // the running incarnation of each node
	flight    []*envelope             // in send order
	seq       uint64
	links     map[[2]uint64]*linkFaults
	paused    map[uint64]bool
	lastAt    map[[2]uint64]int64 // per link, the latest delivery time handed out (FIFO)
	onDeliver func(e *envelope)   // the trace

	delivered, dropped, duplicated int64
}

// linkFaults is what is wrong with the link from one node to another.
type linkFaults struct {
	cut     bool
	loss    float64 // probability a message is lost
	dup     float64 // probability a message is delivered twice
	delay   int     // up to this many ticks late
	reorder bool
}

// envelope is one message in flight. data nil is a node heartbeat.
type envelope struct {
	seq      uint64
	from, to uint64
	inc      *memEndpoint // the sender's incarnation
	group    uint64
	data     []byte
	typ      pb.MessageType
	at       int64 // deliverable from this tick
}

func newMemNet(rng *rand.Rand, tick time.Duration) *memNet {
	return &memNet{
		rng: rng, tick: tick, eps: map[uint64]*memEndpoint{}, links: map[[2]uint64]*linkFaults{},
		paused: map[uint64]bool{}, lastAt: map[[2]uint64]int64{},
	}
}

// attach connects a new incarnation of node id (its host starting).
func (n *memNet) attach(id uint64, ev transportEvents) *memEndpoint {
	ep := &memEndpoint{net: n, id: id, ev: ev, lastHeard: map[uint64]int64{}, peerIdent: map[uint64]PeerIdentity{}}
	n.eps[id] = ep
	return ep
}

func (n *memNet) link(from, to uint64) *linkFaults {
	k := [2]uint64{from, to}
	lf := n.links[k]
	if lf == nil {
		lf = &linkFaults{}
		n.links[k] = lf
	}
	return lf
}

// healAll restores every link (paused nodes stay paused).
func (n *memNet) healAll() { clear(n.links) }

func (n *memNet) enqueue(e *envelope) {
	n.seq++
	e.seq = n.seq
	k := [2]uint64{e.from, e.to}
	lf := n.links[k]
	e.at = n.now
	if lf != nil && lf.delay > 0 {
		e.at += int64(n.rng.IntN(lf.delay + 1))
	}
	if lf == nil || !lf.reorder {
		e.at = max(e.at, n.lastAt[k]) // in order: never before an earlier message
	}
	n.lastAt[k] = max(n.lastAt[k], e.at)
	n.flight = append(n.flight, e)
}

// heartbeats sends node id's heartbeat frame to every node.
func (n *memNet) heartbeats(id uint64, nodes []uint64) {
	ep := n.eps[id]
	for _, to := range nodes {
		if to != id && ep != nil && !ep.closed {
			n.enqueue(&envelope{from: id, to: to, inc: ep})
		}
	}
}

// candidates lists the indexes in flight of the messages that could be
// delivered now: due, to a node that is not paused, and on an in-order
// link only the oldest.
func (n *memNet) candidates() []int {
	var out []int
	head := map[[2]uint64]bool{}
	for i, e := range n.flight {
		k := [2]uint64{e.from, e.to}
		lf := n.links[k]
		inOrder := lf == nil || !lf.reorder
		if inOrder && head[k] {
			continue
		}
		head[k] = true
		if e.at <= n.now && !n.paused[e.to] {
			out = append(out, i)
		}
	}
	return out
}

// deliverIndex delivers (or drops) the message at index i in flight.
func (n *memNet) deliverIndex(i int) {
	e := n.flight[i]
	n.flight = append(n.flight[:i], n.flight[i+1:]...)
	n.deliver(e)
}

func (n *memNet) deliver(e *envelope) {
	dst := n.eps[e.to]
	lf := n.links[[2]uint64{e.from, e.to}]
	lost := lf != nil && (lf.cut || lf.loss > 0 && n.rng.Float64() < lf.loss)
	if dst == nil || dst.closed || lost {
		n.dropped++
		e.inc.dropped++
		if e.data != nil && !e.inc.closed && !n.paused[e.from] {
			e.inc.ev.unreachable(e.to, []uint64{e.group})
			if e.typ == pb.MessageType_MsgSnap {
				e.inc.ev.snapshotSent(e.to, e.group, false)
			}
		}
		return
	}
	if lf != nil && lf.dup > 0 && n.rng.Float64() < lf.dup {
		n.duplicated++
		d := *e
		d.at = n.now + int64(n.rng.IntN(3))
		n.seq++
		d.seq = n.seq
		n.flight = append(n.flight, &d)
	}
	n.delivered++
	dst.lastHeard[e.from] = n.now
	if n.onDeliver != nil {
		n.onDeliver(e)
	}
	if e.data == nil {
		dst.peerIdent[e.from] = PeerIdentity{NodeIdentity: e.inc.ident, Seen: time.Unix(0, 0).Add(time.Duration(n.now) * n.tick)}
		return
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(e.data, m); err != nil {
		panic(fmt.Sprintf("memnet: %v", err)) // we marshaled it
	}
	dst.ev.receive(e.from, []outMsg{{group: e.group, m: m}})
	if e.typ == pb.MessageType_MsgSnap && !e.inc.closed {
		e.inc.ev.snapshotSent(e.to, e.group, true)
	}
}

// memEndpoint is one node incarnation's transport.
type memEndpoint struct {
	net       *memNet
	id        uint64
	ev        transportEvents
	ident     NodeIdentity
	lastHeard map[uint64]int64
	peerIdent map[uint64]PeerIdentity
	closed    bool

	sent, dropped int64
}

func (ep *memEndpoint) addr() string { return fmt.Sprint("mem:", ep.id) }

func (ep *memEndpoint) addPeer(uint64, string)         {} // every node reaches every other
func (ep *memEndpoint) peerAddr(uint64) (string, bool) { return "", false }

// send marshals m now (what the host changes later is not sent) and puts
// it in flight.
func (ep *memEndpoint) send(group uint64, m *pb.Message) {
	if ep.closed {
		return
	}
	b, err := proto.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("memnet: %v", err))
	}
	ep.sent++
	ep.net.enqueue(&envelope{from: ep.id, to: m.GetTo(), inc: ep, group: group, data: b, typ: m.GetType()})
}

// sendHeld: send marshals m at once, so the buffers are free after it.
func (ep *memEndpoint) sendHeld(group uint64, m *pb.Message, refs []*bufref.Ref) {
	ep.send(group, m)
	releaseRefs(refs)
}

func (ep *memEndpoint) setIdentity(id NodeIdentity) { ep.ident = id }

func (ep *memEndpoint) identities() map[uint64]PeerIdentity {
	out := make(map[uint64]PeerIdentity, len(ep.peerIdent))
	for k, v := range ep.peerIdent {
		out[k] = v
	}
	return out
}

func (ep *memEndpoint) heardWithin(peer uint64, d time.Duration) bool {
	last, ok := ep.lastHeard[peer]
	return ok && time.Duration(ep.net.now-last)*ep.net.tick < d
}

func (ep *memEndpoint) heardAllWithin(d time.Duration) bool {
	for peer := range ep.lastHeard {
		if !ep.heardWithin(peer, d) {
			return false
		}
	}
	return true
}

func (ep *memEndpoint) stats() TransportStats {
	return TransportStats{MessagesSent: ep.sent, Dropped: ep.dropped}
}

// close: the node's process is gone. What it sent stays in flight (it was
// on the wire); what is sent to it is dropped.
func (ep *memEndpoint) close() {
	ep.closed = true
	if ep.net.eps[ep.id] == ep {
		delete(ep.net.eps, ep.id)
	}
}
