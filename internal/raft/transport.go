package raft

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"
)

// Frame on the wire between nodes:
//
//	u32 length of the rest | u8 version | 16 B cluster id | u64 from node | u32 count |
//	count × (u64 group | u32 n | n bytes raftpb.Message)
//
// A frame with count 0 is a node-level heartbeat (liveness for quiesced
// groups) and carries the sender's identity after the count:
//
//	16 B directory id | u16 n | n × (u64 node | 16 B directory id)   (the bootstrap voters)
//
// A frame from another cluster closes the connection: a node that was
// pointed at the wrong peers must not vote in our groups. A node that has
// no cluster yet (a zero id: a new or replaced data directory) exchanges
// heartbeats only, so that it can learn which cluster it belongs to and
// whether its directory is one the cluster was formed with.
const (
	frameVersion  = 2
	maxFrame      = 64 << 20
	maxFrameBatch = 4 << 20 // a sender stops adding messages to a frame past this
	frameHeader   = 1 + 16 + 8 + 4
)

// NodeIdentity is what a node tells its peers about itself.
type NodeIdentity struct {
	Cluster   [16]byte // zero: no cluster yet
	Directory [16]byte // this incarnation of the node's data directory
	// Bootstrap: the voters (node -> directory) the cluster was formed
	// with, on a node that formed it; empty otherwise.
	Bootstrap map[uint64][16]byte
}

// PeerIdentity is the identity a peer last sent, and when.
type PeerIdentity struct {
	NodeIdentity
	Seen time.Time
}

// Faults is the fault-injection seam: links between node pairs can be cut,
// delayed or made lossy. One Faults is shared by the hosts of a test; a message on a
// cut link is dropped by the sender (and counted), as a lossy network would.
type Faults struct {
	mu    sync.Mutex
	cut   map[[2]uint64]bool
	delay map[[2]uint64]time.Duration
	loss  map[[2]uint64]float64
	rng   *rand.Rand
}

// NewFaults returns a Faults with every link healthy.
func NewFaults() *Faults {
	return &Faults{
		cut: map[[2]uint64]bool{}, delay: map[[2]uint64]time.Duration{}, loss: map[[2]uint64]float64{},
		rng: rand.New(rand.NewPCG(1, 2)),
	}
}

// Lose drops each frame from a to b with probability p (0 removes it).
func (f *Faults) Lose(from, to uint64, p float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loss[[2]uint64{from, to}] = p
}

// Cut drops all messages between a and b, both ways.
func (f *Faults) Cut(a, b uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut[[2]uint64{a, b}], f.cut[[2]uint64{b, a}] = true, true
}

// Isolate cuts id from every node in others.
func (f *Faults) Isolate(id uint64, others ...uint64) {
	for _, o := range others {
		if o != id {
			f.Cut(id, o)
		}
	}
}

// Delay delays messages from a to b by d (0 removes the delay).
func (f *Faults) Delay(from, to uint64, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay[[2]uint64{from, to}] = d
}

// HealAll restores every link.
func (f *Faults) HealAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.cut)
	clear(f.delay)
	clear(f.loss)
}

func (f *Faults) check(from, to uint64) (cut bool, delay time.Duration) {
	if f == nil {
		return false, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := [2]uint64{from, to}
	if p := f.loss[k]; p > 0 && f.rng.Float64() < p {
		return true, 0
	}
	return f.cut[k], f.delay[k]
}

type outMsg struct {
	group uint64
	m     *pb.Message
}

// transportEvents is what the transport tells its host.
type transportEvents interface {
	receive(from uint64, msgs []outMsg)
	unreachable(peer uint64, groups []uint64)
	snapshotSent(peer, group uint64, ok bool)
}

// TransportStats counts the transport's work.
type TransportStats struct {
	FramesSent, MessagesSent, Dropped, Reconnects int64
}

type transport struct {
	id        uint64
	ident     atomic.Pointer[NodeIdentity]
	ln        net.Listener
	ev        transportEvents
	faults    *Faults
	logger    *slog.Logger
	queueLen  int
	heartbeat time.Duration

	mu     sync.Mutex
	peers  map[uint64]*peer
	conns  map[net.Conn]struct{}
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup

	framesSent, msgsSent, dropped, reconnects atomic.Int64
	lastHeard                                 sync.Map // peer id -> time.Time
	peerIdent                                 sync.Map // peer id -> PeerIdentity
	warned                                    sync.Map // remote addr -> time.Time of the last foreign-cluster warning
}

type peer struct {
	id   uint64
	addr string
	q    chan outMsg
}

func newTransport(id uint64, ident NodeIdentity, listen string, ev transportEvents, faults *Faults, logger *slog.Logger, queueLen int, heartbeat time.Duration) (*transport, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("raft: listen %s: %w", listen, err)
	}
	t := &transport{
		id: id, ln: ln, ev: ev, faults: faults, logger: logger, queueLen: queueLen, heartbeat: heartbeat,
		peers: map[uint64]*peer{}, conns: map[net.Conn]struct{}{}, done: make(chan struct{}),
	}
	t.setIdentity(ident)
	t.wg.Add(1)
	go t.accept()
	return t, nil
}

func (t *transport) addr() string { return t.ln.Addr().String() }

// addPeer registers (or re-addresses) a peer and starts its sender.
func (t *transport) addPeer(id uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || id == t.id {
		return
	}
	if p, ok := t.peers[id]; ok && p.addr == addr {
		return
	}
	p := &peer{id: id, addr: addr, q: make(chan outMsg, t.queueLen)}
	t.peers[id] = p
	t.wg.Add(1)
	go t.sender(p)
}

// send queues m for its destination; never blocks. A full queue or an
// unknown peer drops the message (Raft retransmits) and reports the peer
// unreachable for that group.
func (t *transport) send(group uint64, m *pb.Message) {
	to := m.GetTo()
	t.mu.Lock()
	p := t.peers[to]
	t.mu.Unlock()
	if p != nil {
		select {
		case p.q <- outMsg{group, m}:
			return
		default:
		}
	}
	t.dropped.Add(1)
	t.ev.unreachable(to, []uint64{group})
	if m.GetType() == pb.MessageType_MsgSnap {
		t.ev.snapshotSent(to, group, false)
	}
}

func (t *transport) sender(p *peer) {
	defer t.wg.Done()
	var conn net.Conn
	var w *bufio.Writer
	backoff := 20 * time.Millisecond
	hb := time.NewTicker(t.heartbeat)
	defer hb.Stop()
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	var batch []outMsg
	for {
		batch = batch[:0]
		select {
		case <-t.done:
			return
		case m := <-p.q:
			batch = append(batch, m)
		case <-hb.C: // heartbeat frame: an empty batch
		}
		size := 0
	more:
		for size < maxFrameBatch {
			select {
			case m := <-p.q:
				batch = append(batch, m)
				size += len(m.m.GetEntries()) * 64
				for _, e := range m.m.GetEntries() {
					size += len(e.Data)
				}
			default:
				break more
			}
		}
		cut, delay := t.faults.check(t.id, p.id)
		if cut {
			t.fail(p.id, batch)
			continue
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-t.done:
				return
			}
		}
		if conn == nil {
			c, err := net.DialTimeout("tcp", p.addr, time.Second)
			if err != nil {
				t.fail(p.id, batch)
				select {
				case <-time.After(backoff):
				case <-t.done:
					return
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			t.reconnects.Add(1)
			backoff = 20 * time.Millisecond
			conn, w = c, bufio.NewWriterSize(c, 64<<10)
		}
		frame, err := t.encode(batch)
		if err == nil {
			conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err = w.Write(frame); err == nil {
				err = w.Flush()
			}
		}
		if err != nil {
			t.logger.Debug("raft: send failed", "peer", p.id, "err", err)
			conn.Close()
			conn = nil
			t.fail(p.id, batch)
			continue
		}
		t.framesSent.Add(1)
		t.msgsSent.Add(int64(len(batch)))
		for _, m := range batch {
			if m.m.GetType() == pb.MessageType_MsgSnap {
				t.ev.snapshotSent(p.id, m.group, true)
			}
		}
	}
}

// fail drops a batch that could not be sent.
func (t *transport) fail(peer uint64, batch []outMsg) {
	if len(batch) == 0 {
		return
	}
	t.dropped.Add(int64(len(batch)))
	groups := make([]uint64, 0, len(batch))
	seen := map[uint64]bool{}
	for _, m := range batch {
		if !seen[m.group] {
			seen[m.group] = true
			groups = append(groups, m.group)
		}
		if m.m.GetType() == pb.MessageType_MsgSnap {
			t.ev.snapshotSent(peer, m.group, false)
		}
	}
	t.ev.unreachable(peer, groups)
}

// setIdentity changes what this node says of itself (once it has formed
// or joined a cluster).
func (t *transport) setIdentity(id NodeIdentity) {
	id.Bootstrap = maps.Clone(id.Bootstrap)
	t.ident.Store(&id)
}

func (t *transport) encode(batch []outMsg) ([]byte, error) {
	id := t.ident.Load()
	b := make([]byte, 4, 64)
	b = append(b, frameVersion)
	b = append(b, id.Cluster[:]...)
	b = binary.BigEndian.AppendUint64(b, t.id)
	b = binary.BigEndian.AppendUint32(b, uint32(len(batch)))
	if len(batch) == 0 {
		b = append(b, id.Directory[:]...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(id.Bootstrap)))
		for _, node := range slices.Sorted(maps.Keys(id.Bootstrap)) {
			d := id.Bootstrap[node]
			b = binary.BigEndian.AppendUint64(b, node)
			b = append(b, d[:]...)
		}
	}
	for _, m := range batch {
		b = binary.BigEndian.AppendUint64(b, m.group)
		n := len(b)
		b = append(b, 0, 0, 0, 0)
		var err error
		b, err = proto.MarshalOptions{}.MarshalAppend(b, m.m)
		if err != nil {
			return nil, err
		}
		binary.BigEndian.PutUint32(b[n:], uint32(len(b)-n-4))
	}
	if len(b)-4 > maxFrame {
		return nil, fmt.Errorf("raft: frame of %d bytes", len(b)-4)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b, nil
}

func (t *transport) accept() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			c.Close()
			return
		}
		t.conns[c] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.read(c)
	}
}

func (t *transport) read(c net.Conn) {
	defer t.wg.Done()
	defer func() {
		c.Close()
		t.mu.Lock()
		delete(t.conns, c)
		t.mu.Unlock()
	}()
	r := bufio.NewReaderSize(c, 64<<10)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n < frameHeader || n > maxFrame {
			t.logger.Warn("raft: bad frame length, closing connection", "len", n, "remote", c.RemoteAddr().String())
			return
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return
		}
		if buf[0] != frameVersion {
			t.warnOnce(c, "raft: frame of another protocol version (a node of another Holdfast version?), closing connection", "version", buf[0])
			return
		}
		var cluster [16]byte
		copy(cluster[:], buf[1:17])
		from, msgs, ident, err := decodeFrame(buf[17:])
		if err != nil {
			t.logger.Warn("raft: bad frame, closing connection", "err", err, "remote", c.RemoteAddr().String())
			return
		}
		if cut, _ := t.faults.check(from, t.id); cut {
			continue // sent before the cut, delivered after: drop
		}
		if ident != nil {
			ident.Cluster = cluster
			t.peerIdent.Store(from, PeerIdentity{NodeIdentity: *ident, Seen: time.Now()})
		}
		mine := t.ident.Load().Cluster
		switch {
		case cluster == mine:
		case cluster != [16]byte{} && mine != [16]byte{}:
			t.warnOnce(c, "raft: frame from a node of another cluster, closing connection", "from", from,
				"cluster", base64.RawURLEncoding.EncodeToString(cluster[:]), "ours", base64.RawURLEncoding.EncodeToString(mine[:]))
			return
		default:
			continue // one side has no cluster yet: identities only
		}
		t.lastHeard.Store(from, time.Now())
		if len(msgs) > 0 {
			t.ev.receive(from, msgs)
		}
	}
}

// warnOnce logs a refused connection at most once a minute per remote host.
func (t *transport) warnOnce(c net.Conn, msg string, args ...any) {
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	if v, ok := t.warned.Load(host); ok && time.Since(v.(time.Time)) < time.Minute {
		return
	}
	t.warned.Store(host, time.Now())
	t.logger.Warn(msg, append(args, "remote", c.RemoteAddr().String())...)
}

// identities returns what each peer last said of itself.
func (t *transport) identities() map[uint64]PeerIdentity {
	out := map[uint64]PeerIdentity{}
	t.peerIdent.Range(func(k, v any) bool {
		out[k.(uint64)] = v.(PeerIdentity)
		return true
	})
	return out
}

func decodeFrame(b []byte) (uint64, []outMsg, *NodeIdentity, error) {
	from := binary.BigEndian.Uint64(b)
	count := binary.BigEndian.Uint32(b[8:])
	b = b[12:]
	if count == 0 {
		if len(b) < 18 {
			return 0, nil, nil, errors.New("truncated identity")
		}
		id := &NodeIdentity{}
		copy(id.Directory[:], b)
		n := int(binary.BigEndian.Uint16(b[16:]))
		b = b[18:]
		if len(b) != n*24 {
			return 0, nil, nil, fmt.Errorf("identity claims %d voters in %d bytes", n, len(b))
		}
		if n > 0 {
			id.Bootstrap = make(map[uint64][16]byte, n)
		}
		for range n {
			var d [16]byte
			copy(d[:], b[8:24])
			id.Bootstrap[binary.BigEndian.Uint64(b)] = d
			b = b[24:]
		}
		return from, nil, id, nil
	}
	if int(count) > len(b)/12 {
		return 0, nil, nil, fmt.Errorf("frame claims %d messages in %d bytes", count, len(b))
	}
	msgs := make([]outMsg, 0, count)
	for range count {
		if len(b) < 12 {
			return 0, nil, nil, errors.New("truncated message header")
		}
		g := binary.BigEndian.Uint64(b)
		n := binary.BigEndian.Uint32(b[8:])
		b = b[12:]
		if int(n) > len(b) {
			return 0, nil, nil, errors.New("truncated message")
		}
		m := &pb.Message{}
		if err := proto.Unmarshal(b[:n], m); err != nil {
			return 0, nil, nil, err
		}
		msgs = append(msgs, outMsg{g, m})
		b = b[n:]
	}
	return from, msgs, nil, nil
}

// heardWithin reports whether a frame from peer arrived within d.
func (t *transport) heardWithin(peer uint64, d time.Duration) bool {
	v, ok := t.lastHeard.Load(peer)
	return ok && time.Since(v.(time.Time)) < d
}

func (t *transport) stats() TransportStats {
	return TransportStats{FramesSent: t.framesSent.Load(), MessagesSent: t.msgsSent.Load(), Dropped: t.dropped.Load(), Reconnects: t.reconnects.Load()}
}

func (t *transport) close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	close(t.done)
	t.ln.Close()
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
}
