package raft

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/bufref"
	"holdfast/internal/clock"
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
//
// What a peer connection may hold is bounded: a frame is at most maxFrame
// bytes; frame bodies are read in chunks taken from one byte budget shared
// by every inbound connection (maxInboundBytes), so peers that announce
// large frames and stall cannot grow memory; a connection that sends
// nothing for idleTimeout (peers send a heartbeat frame every tick) or
// takes longer than frameTimeout to deliver a started frame is closed; at
// most maxInboundConns peers connect at once.
//
// A connection speaks for one node. With TLS set, only peers whose
// certificate the cluster's CA signed connect at all (mutual TLS, both
// ways), and the certificate must name a node that is one of our peers
// (TransportTLS.NodeOf): that node is the session's, and a frame whose
// from is another node closes the connection. So a client's certificate
// of the same CA gets no session, and a node's certificate cannot speak
// for another node; a node we dial must present the certificate of the
// node we meant. Without TLS there is no identity: the first frame names
// the session's node, which must be a peer. Either way every message's
// From is the frame's and its To is this node. Until a peer is
// identified (the TLS handshake and its certificate, or the first
// frame's header without TLS) it has handshakeTimeout and holds no
// frame buffer; at most maxUnidentified connections (maxUnidentifiedPerHost
// from one address) wait to be identified. Every refusal is counted by
// reason (TransportStats.RefusedBy) and logged, once a minute per remote
// host and reason.
const (
	frameVersion     = 2
	maxFrame         = 64 << 20
	maxFrameBatch    = 4 << 20 // a sender stops adding messages to a frame past this
	frameHeader      = 1 + 16 + 8 + 4
	maxInboundBytes  = 256 << 20 // frame bytes being read, across inbound connections
	frameChunk       = 1 << 20
	maxInboundConns  = 1024
	idleTimeout      = 30 * time.Second
	frameTimeout     = 30 * time.Second
	handshakeTimeout = 10 * time.Second
	// connections not yet identified, in all and from one remote host
	maxUnidentified        = 128
	maxUnidentifiedPerHost = 16
)

// TransportTLS runs the transport over mutual TLS: Server is the listener's
// config (it must require and verify client certificates), Client returns a
// config for dialing a peer's address with this node's certificate.
type TransportTLS struct {
	Server *tls.Config
	Client func(addr string) *tls.Config
	// NodeOf returns the node a verified peer certificate belongs to
	// (auth.PrincipalMapper.CertNode), an error for one that is no node's.
	NodeOf func(cert *x509.Certificate) (uint64, error)
}

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

// TransportStats counts the transport's work.
type TransportStats struct {
	FramesSent, MessagesSent, Dropped, Reconnects int64
	// Refused counts connections closed for a failed TLS handshake, a
	// certificate that is not a node's, a frame that speaks for another
	// node, a bad frame or a connection limit; RefusedBy by reason
	// (refusalNames).
	Refused   int64
	RefusedBy map[string]int64
	// QueueFullBy counts the messages dropped on a full send queue (a
	// slow peer: back-pressure), by kind (DropKinds); Dropped counts them
	// too.
	QueueFullBy map[string]int64
}

// refusal is why the transport closed a connection.
type refusal int

const (
	refusedHandshake     refusal = iota // TLS handshake failed (no certificate of the cluster's CA, ...)
	refusedNotNode                      // a verified certificate that names no node (a client's)
	refusedUnknownNode                  // a certificate or frame of a node that is not a peer (or is this node)
	refusedImpersonation                // a frame whose from is not the session's node
	refusedAddress                      // a message whose From is not the frame's, or whose To is not this node
	refusedOtherCluster                 // a frame of another cluster
	refusedBadFrame                     // malformed, oversized, of another version
	refusedLimit                        // too many connections, or too many not yet identified
	refusedWrongServer                  // a node we dialed presented another node's certificate
	numRefusals
)

// refusalNames label the refusals (holdfast_raft_refused_total{reason}).
var refusalNames = [numRefusals]string{"tls_handshake", "not_a_node", "unknown_node", "impersonation",
	"wrong_address", "other_cluster", "bad_frame", "connection_limit", "wrong_server"}

// RefusalReasons are the reasons TransportStats.RefusedBy counts.
func RefusalReasons() []string { return slices.Clone(refusalNames[:]) }

// refusedError is a frame the reader refuses, and why.
type refusedError struct {
	why  refusal
	msg  string
	args []any
}

func (e *refusedError) Error() string { return e.msg }

type tcpTransport struct {
	id       uint64
	ident    atomic.Pointer[NodeIdentity]
	ln       net.Listener
	tls      *TransportTLS
	budget   chan struct{} // one token per frameChunk of inbound frame bytes
	ev       transportEvents
	faults   *Faults
	logger   *slog.Logger
	queueLen int
	// queueBytes bounds the entry bytes in a peer's q (maxQueueBytes;
	// tests set less).
	queueBytes int64
	heartbeat  time.Duration
	clk        clock.Clock // the host's (set before the first sender starts)

	mu     sync.Mutex
	peers  map[uint64]*peer
	conns  map[net.Conn]struct{}
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup

	framesSent, msgsSent, dropped, reconnects atomic.Int64
	refused                                   [numRefusals]atomic.Int64
	queueFull                                 [numKinds]atomic.Int64 // drops on a full queue, by kind
	lastHeard                                 sync.Map               // peer id -> time.Time
	peerIdent                                 sync.Map               // peer id -> PeerIdentity

	unidentified   int            // inbound connections not yet identified (under mu)
	unidentifiedBy map[string]int // by remote host (under mu)

	warnMu sync.Mutex
	warned map[string]time.Time // remote host and message -> last warning
}

// peer is a peer's sender and its two queues. A full queue is
// back-pressure from a live peer (its sender is behind: the connection's
// writes block on a peer that reads slowly), not unreachability. Every
// message dropped on it was reported to its group as unreachable, and
// the ISR was Raft's StateReplicate: at 1,000 partitions on a loaded
// machine a slow peer's drops (41,000-47,300 after a restart, most of
// them heartbeats) took followers out of their ISRs by the hundred
// (docs/benchmarks.md, round 16, h-rf3big). Now the ISR is the lag
// (isr.go), and only a dropped append is reported (sendHeld: flow
// control, as etcd's own transport does). What is cheap to drop goes in
// q, bounded by count and by bytes: appends and snapshots (Raft resends
// them) and plain heartbeats (the next comes a tick later). The rest goes
// in ctl, read first: responses and votes, whose loss costs a round (a
// MsgAppResp lost holds the commit until the next heartbeat's; a vote
// lost, an election), and heartbeats with a context (quiescing, waking),
// which are sent once.
type peer struct {
	id     uint64
	addr   string
	q      chan outMsg
	ctl    chan outMsg
	queued atomic.Int64 // bytes of entries in q
}

// maxQueueBytes bounds the entry bytes waiting in one peer's q: past it
// appends are dropped (their buffers are not held for a peer that cannot
// take them).
const maxQueueBytes = 256 << 20

// Kinds of messages, for the drops counted by kind (TransportStats.DroppedBy).
const (
	kindAppend = iota
	kindSnapshot
	kindHeartbeat
	kindAppendResp
	kindHeartbeatResp
	kindVote
	kindOther
	numKinds
)

var kindNames = [numKinds]string{"append", "snapshot", "heartbeat", "append_response", "heartbeat_response", "vote", "other"}

// DropKinds are the kinds TransportStats.DroppedBy counts.
func DropKinds() []string { return slices.Clone(kindNames[:]) }

func kindOf(m *pb.Message) int {
	switch m.GetType() {
	case pb.MessageType_MsgApp:
		return kindAppend
	case pb.MessageType_MsgSnap:
		return kindSnapshot
	case pb.MessageType_MsgHeartbeat:
		return kindHeartbeat
	case pb.MessageType_MsgAppResp:
		return kindAppendResp
	case pb.MessageType_MsgHeartbeatResp:
		return kindHeartbeatResp
	case pb.MessageType_MsgVote, pb.MessageType_MsgVoteResp, pb.MessageType_MsgPreVote, pb.MessageType_MsgPreVoteResp:
		return kindVote
	}
	return kindOther
}

// bulk reports whether m goes in a peer's q (cheap to drop) rather than
// its ctl queue.
func bulk(m *pb.Message) bool {
	switch m.GetType() {
	case pb.MessageType_MsgApp, pb.MessageType_MsgSnap:
		return true
	case pb.MessageType_MsgHeartbeat:
		return len(m.Context) == 0
	}
	return false
}

// msgBytes is what m's entries weigh in a queue and a frame.
func msgBytes(m *pb.Message) int {
	n := len(m.GetEntries()) * 64
	for _, e := range m.GetEntries() {
		n += len(e.Data)
	}
	return n
}

func newTransport(id uint64, ident NodeIdentity, listen string, ev transportEvents, faults *Faults, logger *slog.Logger, queueLen int, heartbeat time.Duration, tlsCfg *TransportTLS) (*tcpTransport, error) {
	if tlsCfg != nil && (tlsCfg.Server == nil || tlsCfg.Client == nil || tlsCfg.NodeOf == nil) {
		return nil, errors.New("raft: TLS needs a server and a client config and a certificate to node mapping")
	}
	var ln net.Listener
	if listen != "" {
		var err error
		if ln, err = net.Listen("tcp", listen); err != nil {
			return nil, fmt.Errorf("raft: listen %s: %w", listen, err)
		}
	}
	t := &tcpTransport{
		id: id, ln: ln, tls: tlsCfg, ev: ev, faults: faults, logger: logger, queueLen: queueLen, queueBytes: maxQueueBytes, heartbeat: heartbeat,
		peers: map[uint64]*peer{}, conns: map[net.Conn]struct{}{}, done: make(chan struct{}),
		unidentifiedBy: map[string]int{}, warned: map[string]time.Time{},
		budget: make(chan struct{}, maxInboundBytes/frameChunk),
	}
	t.setIdentity(ident)
	if ln != nil {
		t.wg.Add(1)
		go t.accept()
	}
	return t, nil
}

// addr is the address the transport listens on, "" if it does not (a
// single node: no peers, no port).
func (t *tcpTransport) addr() string {
	if t.ln == nil {
		return ""
	}
	return t.ln.Addr().String()
}

// addPeer registers (or re-addresses) a peer and starts its sender.
func (t *tcpTransport) addPeer(id uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || id == t.id {
		return
	}
	if p, ok := t.peers[id]; ok && p.addr == addr {
		return
	}
	p := &peer{id: id, addr: addr, q: make(chan outMsg, t.queueLen), ctl: make(chan outMsg, t.queueLen)}
	t.peers[id] = p
	t.wg.Add(1)
	go t.sender(p)
}

// peerAddr is the address a peer is sent to, if it is one.
func (t *tcpTransport) peerAddr(id uint64) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.peers[id]
	if !ok {
		return "", false
	}
	return p.addr, true
}

// send queues m for its destination; never blocks. An unknown peer drops
// the message (Raft retransmits) and reports the peer unreachable for
// that group; a full queue drops it and reports only an append (see peer).
func (t *tcpTransport) send(group uint64, m *pb.Message) { t.sendHeld(group, m, nil) }

func (t *tcpTransport) sendHeld(group uint64, m *pb.Message, refs []*bufref.Ref) {
	to := m.GetTo()
	t.mu.Lock()
	p := t.peers[to]
	t.mu.Unlock()
	om := outMsg{group: group, m: m, refs: refs}
	if p == nil {
		releaseRefs(refs)
		t.dropped.Add(1)
		t.ev.unreachable(to, []uint64{group})
		if m.GetType() == pb.MessageType_MsgSnap {
			t.ev.snapshotSent(to, group, false)
		}
		return
	}
	if !bulk(m) {
		select {
		case p.ctl <- om:
			return
		default:
		}
	} else {
		// Within the byte bound, or alone in the queue (one message
		// larger than the bound still goes).
		n := int64(msgBytes(m))
		if q := p.queued.Add(n); q <= t.queueBytes || q == n {
			select {
			case p.q <- om:
				return
			default:
			}
		}
		p.queued.Add(-n)
	}
	releaseRefs(refs)
	t.dropped.Add(1)
	t.queueFull[kindOf(m)].Add(1)
	switch m.GetType() {
	case pb.MessageType_MsgSnap:
		t.ev.snapshotSent(to, group, false)
	case pb.MessageType_MsgApp:
		// Flow control, not unreachability: a leader replicating to
		// this follower pipelines its appends, and every one after a
		// dropped one would be rejected (a gap) and sent again. Probing,
		// it sends one append per answer until the follower catches up.
		// (Raft's ReportUnreachable is only that: StateReplicate to
		// StateProbe; the ISR no longer reads it, isr.go.) etcd's own
		// transport does the same; not reporting them, a slow follower
		// in TestSlowFollowerStaysInSync got ten times the drops.
		t.ev.unreachable(to, []uint64{group})
	}
}

// took accounts for a message the sender took from p's q.
func (p *peer) took(m outMsg) outMsg {
	p.queued.Add(-int64(msgBytes(m.m)))
	return m
}

func (t *tcpTransport) sender(p *peer) {
	defer t.wg.Done()
	var conn net.Conn
	var w *bufio.Writer
	backoff := 20 * time.Millisecond
	clk := clock.OrReal(t.clk)
	hb := clk.NewTicker(t.heartbeat)
	defer hb.Stop()
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	var batch []outMsg
	var fe frameEncoder
	for {
		clear(batch) // the messages sent last hold batch bytes
		batch = batch[:0]
		select {
		case <-t.done:
			return
		case m := <-p.ctl:
			batch = append(batch, m)
		case m := <-p.q:
			batch = append(batch, p.took(m))
		case <-hb.C: // heartbeat frame: an empty batch
		}
		size := 0
	more:
		for size < maxFrameBatch {
			select { // the control queue first: it is small and never waits behind appends
			case m := <-p.ctl:
				batch = append(batch, m)
				continue
			default:
			}
			select {
			case m := <-p.q:
				batch = append(batch, p.took(m))
				size += msgBytes(m.m)
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
			case <-clk.After(delay):
			case <-t.done:
				return
			}
		}
		if conn == nil {
			c, err := t.dial(p.id, p.addr)
			if err != nil {
				t.fail(p.id, batch)
				select {
				case <-clk.After(backoff):
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
		err := t.encode(&fe, batch)
		if err == nil {
			conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if tc, ok := conn.(*net.TCPConn); ok {
				vec := fe.buffers()
				_, err = vec.WriteTo(tc) // writev: entry data from the batch bytes
			} else {
				for _, b := range fe.buffers() {
					if _, err = w.Write(b); err != nil {
						break
					}
				}
				if err == nil {
					err = w.Flush()
				}
			}
		}
		fe.reset()
		if err != nil {
			t.logger.Debug("raft: send failed", "peer", p.id, "err", err)
			conn.Close()
			conn = nil
			t.fail(p.id, batch)
			continue
		}
		t.framesSent.Add(1)
		t.msgsSent.Add(int64(len(batch)))
		releaseBatch(batch) // written: the entries' buffers may be reused
		for _, m := range batch {
			if m.m.GetType() == pb.MessageType_MsgSnap {
				t.ev.snapshotSent(p.id, m.group, true)
			}
		}
	}
}

// releaseBatch gives back the buffer references of a batch the sender no
// longer reads (fe.reset came first: the frame encoder's pieces point into
// them).
func releaseBatch(batch []outMsg) {
	for i := range batch {
		releaseRefs(batch[i].refs)
		batch[i].refs = nil
	}
}

func releaseRefs(refs []*bufref.Ref) {
	for _, r := range refs {
		r.Release()
	}
}

// fail drops a batch that could not be sent.
func (t *tcpTransport) fail(peer uint64, batch []outMsg) {
	if len(batch) == 0 {
		return
	}
	releaseBatch(batch)
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
func (t *tcpTransport) setIdentity(id NodeIdentity) {
	id.Bootstrap = maps.Clone(id.Bootstrap)
	t.ident.Store(&id)
}

// encode builds the frame of batch in fe (see msgcodec.go).
func (t *tcpTransport) encode(fe *frameEncoder, batch []outMsg) error {
	id := t.ident.Load()
	fe.reset()
	b := append(fe.buf, 0, 0, 0, 0, frameVersion)
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
	fe.buf = b
	for _, m := range batch {
		fe.buf = binary.BigEndian.AppendUint64(fe.buf, m.group)
		n := len(fe.buf)
		fe.buf = append(fe.buf, 0, 0, 0, 0)
		size, err := fe.appendMessage(m.m)
		if err != nil {
			return err
		}
		if size > maxFrame {
			return fmt.Errorf("raft: message of %d bytes", size)
		}
		binary.BigEndian.PutUint32(fe.buf[n:], uint32(size))
	}
	n := fe.size() - 4
	if n > maxFrame {
		return fmt.Errorf("raft: frame of %d bytes", n)
	}
	binary.BigEndian.PutUint32(fe.buf, uint32(n))
	return nil
}

// dial connects to peer id, over mutual TLS when configured: then the
// peer must present node id's certificate.
func (t *tcpTransport) dial(id uint64, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: time.Second}
	if t.tls == nil {
		return d.Dial("tcp", addr)
	}
	td := &tls.Dialer{NetDialer: &net.Dialer{Timeout: handshakeTimeout}, Config: t.tls.Client(addr)}
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	c, err := td.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.logger.Debug("raft: TLS dial failed", "addr", addr, "err", err)
		return nil, err
	}
	var node uint64
	if certs := c.(*tls.Conn).ConnectionState().PeerCertificates; len(certs) == 0 {
		err = errors.New("no certificate")
	} else {
		node, err = t.tls.NodeOf(certs[0])
	}
	if err == nil && node != id {
		err = fmt.Errorf("the certificate is node %d's", node)
	}
	if err != nil {
		t.refuse(c, refusedWrongServer, "raft: the peer at this address is not the node we dialed, closing connection", "node", id, "err", err)
		c.Close()
		return nil, err
	}
	return c, nil
}

// isPeer reports whether id is one of this node's peers (not itself).
func (t *tcpTransport) isPeer(id uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.peers[id]
	return ok
}

// refuse counts a refused connection and logs why (rate-limited).
func (t *tcpTransport) refuse(c net.Conn, why refusal, msg string, args ...any) {
	t.refused[why].Add(1)
	t.warnOnce(c, msg, append(args, "reason", refusalNames[why])...)
}

func (t *tcpTransport) accept() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			c.Close()
			return
		}
		host := remoteHost(c)
		if len(t.conns) >= maxInboundConns || t.unidentified >= maxUnidentified || t.unidentifiedBy[host] >= maxUnidentifiedPerHost {
			t.mu.Unlock()
			t.refuse(c, refusedLimit, "raft: too many inbound connections (or too many not yet identified), refusing one",
				"limit", maxInboundConns, "unidentified_limit", maxUnidentified, "unidentified_per_host_limit", maxUnidentifiedPerHost)
			c.Close()
			continue
		}
		if t.tls != nil {
			c = tls.Server(c, t.tls.Server)
		}
		t.conns[c] = struct{}{}
		t.unidentified++
		t.unidentifiedBy[host]++
		t.wg.Add(1)
		t.mu.Unlock()
		go t.read(c, host)
	}
}

func (t *tcpTransport) read(c net.Conn, host string) {
	defer t.wg.Done()
	pending := true
	identified := func() { // no longer counted as waiting to be identified
		if pending {
			pending = false
			t.mu.Lock()
			t.unidentified--
			if t.unidentifiedBy[host]--; t.unidentifiedBy[host] <= 0 {
				delete(t.unidentifiedBy, host)
			}
			t.mu.Unlock()
		}
	}
	defer func() {
		identified()
		c.Close()
		t.mu.Lock()
		delete(t.conns, c)
		t.mu.Unlock()
	}()
	// Until identified: the handshake and (without TLS) the first frame's
	// header within handshakeTimeout, read without a buffer of its own.
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	var session uint64 // the node this connection speaks for; 0: not yet known
	if tc, ok := c.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			t.refuse(c, refusedHandshake, "raft: TLS handshake failed, closing connection (a node without the cluster's certificate?)", "err", err)
			return
		}
		certs := tc.ConnectionState().PeerCertificates
		if len(certs) == 0 { // a server config that does not require client certificates
			t.refuse(c, refusedNotNode, "raft: a peer without a certificate, closing connection")
			return
		}
		cert := certs[0]
		node, err := t.tls.NodeOf(cert)
		if err != nil {
			t.refuse(c, refusedNotNode, "raft: a certificate that is not a node's, closing connection", "subject", cert.Subject.String(), "err", err)
			return
		}
		if node == t.id || !t.isPeer(node) {
			t.refuse(c, refusedUnknownNode, "raft: the certificate of a node that is not a peer, closing connection", "node", node, "subject", cert.Subject.String())
			return
		}
		session = node
		identified()
		c.SetDeadline(time.Time{})
	}
	var r io.Reader = c
	if session != 0 {
		r = bufio.NewReaderSize(c, 64<<10)
	}
	admit := func(f *frame) error {
		switch {
		case session != 0 && f.from != session:
			return &refusedError{refusedImpersonation, "raft: a frame that speaks for another node than the connection's, closing connection", []any{"from", f.from, "node", session}}
		case f.from == t.id || !t.isPeer(f.from):
			return &refusedError{refusedUnknownNode, "raft: a frame from a node that is not a peer, closing connection", []any{"from", f.from}}
		}
		if session == 0 {
			session = f.from
			identified()
			c.SetReadDeadline(time.Now().Add(frameTimeout))
		}
		return nil
	}
	var hdr [4]byte
	for {
		if session != 0 {
			c.SetReadDeadline(time.Now().Add(max(idleTimeout, 10*t.heartbeat)))
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.logger.Info("raft: closing idle peer connection", "remote", c.RemoteAddr().String(), "node", session)
			}
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n < frameHeader || n > maxFrame {
			t.refuse(c, refusedBadFrame, "raft: bad frame length, closing connection", "len", n)
			return
		}
		if session != 0 {
			c.SetReadDeadline(time.Now().Add(frameTimeout))
		}
		f, err := t.readFrame(r, int(n), admit)
		var version versionError
		var refused *refusedError
		switch {
		case errors.As(err, &refused):
			t.refuse(c, refused.why, refused.msg, refused.args...)
			return
		case errors.As(err, &version):
			t.refuse(c, refusedBadFrame, "raft: frame of a protocol version this binary does not speak (a node of another Holdfast release?), closing connection",
				"version", uint8(version), "this_binary_speaks", frameVersion)
			return
		case errors.Is(err, errBadFrame):
			t.refuse(c, refusedBadFrame, "raft: bad frame, closing connection", "err", err)
			return
		case err != nil:
			return
		}
		if !t.deliver(c, f) {
			return
		}
		if _, buffered := r.(*bufio.Reader); !buffered {
			r = bufio.NewReaderSize(c, 64<<10) // identified: nothing read ahead yet
		}
	}
}

// deliver hands a frame's messages to the host, and reports whether the
// connection stays open. The transport's references to the messages'
// buffers are given back after (the groups took their own).
func (t *tcpTransport) deliver(c net.Conn, f frame) bool {
	defer releaseBatch(f.msgs)
	cluster, from, msgs, ident := f.cluster, f.from, f.msgs, f.ident
	if cut, _ := t.faults.check(from, t.id); cut {
		return true // sent before the cut, delivered after: drop
	}
	if ident != nil {
		ident.Cluster = cluster
		t.peerIdent.Store(from, PeerIdentity{NodeIdentity: *ident, Seen: time.Now()})
	}
	mine := t.ident.Load().Cluster
	switch {
	case cluster == mine:
	case cluster != [16]byte{} && mine != [16]byte{}:
		t.refuse(c, refusedOtherCluster, "raft: frame from a node of another cluster, closing connection", "from", from,
			"cluster", base64.RawURLEncoding.EncodeToString(cluster[:]), "ours", base64.RawURLEncoding.EncodeToString(mine[:]))
		return false
	default:
		return true // one side has no cluster yet: identities only
	}
	t.lastHeard.Store(from, time.Now())
	if len(msgs) > 0 {
		t.ev.receive(from, msgs)
	}
	return true
}

// warnOnce logs a refused connection at most once a minute per remote
// host and message.
func (t *tcpTransport) warnOnce(c net.Conn, msg string, args ...any) {
	key, now := remoteHost(c)+" "+msg, time.Now()
	t.warnMu.Lock()
	last, ok := t.warned[key]
	if ok && now.Sub(last) < time.Minute {
		t.warnMu.Unlock()
		return
	}
	if len(t.warned) >= 4096 { // many hosts: forget those not warned of lately
		for k, v := range t.warned {
			if now.Sub(v) >= time.Minute {
				delete(t.warned, k)
			}
		}
	}
	if len(t.warned) < 4096 {
		t.warned[key] = now
	}
	t.warnMu.Unlock()
	t.logger.Warn(msg, append(args, "remote", c.RemoteAddr().String())...)
}

// remoteHost is the host part of a connection's remote address.
func remoteHost(c net.Conn) string {
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// identities returns what each peer last said of itself.
func (t *tcpTransport) identities() map[uint64]PeerIdentity {
	out := map[uint64]PeerIdentity{}
	t.peerIdent.Range(func(k, v any) bool {
		out[k.(uint64)] = v.(PeerIdentity)
		return true
	})
	return out
}

// frame is what a frame carried.
type frame struct {
	cluster [16]byte
	from    uint64
	msgs    []outMsg
	ident   *NodeIdentity // a heartbeat frame's
}

// versionError: a frame of another protocol version.
type versionError uint8

func (v versionError) Error() string { return fmt.Sprintf("raft: frame version %d", uint8(v)) }

var errBadFrame = errors.New("raft: bad frame")

// readFrame reads and decodes an n-byte frame body. Each message is read
// into a buffer of its own that its entries' data then point into (see
// msgcodec.go). The bytes are read under the shared budget, a chunk at a
// time as they arrive (a stalled peer holds one chunk, until
// frameTimeout), and the budget is given back when the frame is read.
//
// admit, if set, is asked about the frame once its header is read (before
// any of its body), and any message whose From is not the frame's or whose
// To is not this node is refused.
func (t *tcpTransport) readFrame(r io.Reader, n int, admit func(*frame) error) (f frame, err error) {
	fr := frameReader{t: t, r: r}
	defer fr.release()
	defer func() {
		if err != nil {
			releaseBatch(f.msgs) // a bad frame: nothing was stepped
			f.msgs = nil
		}
	}()
	// The header outside the budget: a connection not yet identified
	// (that may never send it) holds none of the budget.
	var hdr [frameHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return f, err
	}
	if hdr[0] != frameVersion {
		return f, versionError(hdr[0])
	}
	copy(f.cluster[:], hdr[1:17])
	f.from = binary.BigEndian.Uint64(hdr[17:])
	count := binary.BigEndian.Uint32(hdr[25:])
	if admit != nil {
		if err := admit(&f); err != nil {
			return f, err
		}
	}
	left := n - frameHeader
	if count == 0 {
		b, err := fr.body(left)
		if err != nil {
			return f, err
		}
		f.ident, err = decodeIdentity(b)
		return f, err
	}
	if int64(count) > int64(left/12) {
		return f, fmt.Errorf("%w: %d messages in %d bytes", errBadFrame, count, left)
	}
	// Grown as messages arrive: an announced count is not allocated
	// before its bytes come.
	f.msgs = make([]outMsg, 0, min(count, 64))
	var mh [12]byte
	for range count {
		if left < len(mh) {
			return f, fmt.Errorf("%w: truncated message header", errBadFrame)
		}
		if err := fr.read(mh[:]); err != nil {
			return f, err
		}
		left -= len(mh)
		g, k := binary.BigEndian.Uint64(mh[:]), binary.BigEndian.Uint32(mh[8:])
		if int64(k) > int64(left) {
			return f, fmt.Errorf("%w: message of %d bytes, %d left in the frame", errBadFrame, k, left)
		}
		b, err := fr.body(int(k))
		if err != nil {
			return f, err
		}
		left -= int(k)
		m, err := decodeMessage(b)
		if err != nil {
			return f, fmt.Errorf("%w: group %d: %w", errBadFrame, g, err)
		}
		f.msgs = append(f.msgs, outMsg{group: g, m: m, refs: receivedRefs(m, b)})
		if m.GetFrom() != f.from || m.GetTo() != t.id {
			return f, &refusedError{refusedAddress, "raft: a message not from the frame's node or not to this node, closing connection",
				[]any{"from", f.from, "message_from", m.GetFrom(), "message_to", m.GetTo(), "group", g, "type", m.GetType().String()}}
		}
	}
	if left != 0 {
		return f, fmt.Errorf("%w: %d bytes after the last message", errBadFrame, left)
	}
	return f, nil
}

// receivedRefs returns the reference to b, the pooled buffer m was
// decoded from, that the transport holds while m is stepped (nil if b is
// not pooled, or m does not point into it: then b goes back at once). Only
// a MsgApp's batches stay in b: a side entry's data (a command, a
// membership change, kept by the store and the journal) and the entries
// of any other message are copied out first.
func receivedRefs(m *pb.Message, b []byte) []*bufref.Ref {
	r := recvRef(b)
	if r == nil {
		return nil
	}
	held := false
	for _, e := range m.Entries {
		if !r.Holds(e.Data) {
			continue
		}
		if m.GetType() != pb.MessageType_MsgApp || !isDataEntry(e) {
			e.Data = bytes.Clone(e.Data)
			continue
		}
		held = true
	}
	if !held {
		r.Release()
		return nil
	}
	return []*bufref.Ref{r}
}

// frameReader reads a frame's bytes under the shared budget: one token
// per frameChunk bytes read, taken as they are about to be read.
type frameReader struct {
	t      *tcpTransport
	r      io.Reader
	got    int // bytes read
	tokens int // budget taken
}

func (fr *frameReader) read(dst []byte) error {
	for len(dst) > 0 {
		if fr.got == fr.tokens*frameChunk {
			select {
			case fr.t.budget <- struct{}{}:
				fr.tokens++
			case <-fr.t.done:
				return errors.New("raft: transport closed")
			}
		}
		k := min(len(dst), fr.tokens*frameChunk-fr.got)
		if _, err := io.ReadFull(fr.r, dst[:k]); err != nil {
			return err
		}
		fr.got += k
		dst = dst[k:]
	}
	return nil
}

// body reads the next n bytes into a buffer: from recvpool.go's pool if
// n is of a pooled class (at least recvPooledMin), else a new one. A
// large one grows as its bytes arrive (an announced size is not allocated
// before its bytes come) unless the pool has a free buffer for it.
func (fr *frameReader) body(n int) ([]byte, error) {
	if n < recvPooledMin {
		b := make([]byte, n)
		return b, fr.read(b)
	}
	if n <= frameChunk {
		b := recvBuf(n)
		return b, fr.read(b)
	}
	if b, ok := recvPooledBuf(n); ok {
		return b, fr.read(b)
	}
	b := make([]byte, 0, frameChunk)
	for len(b) < n {
		k := min(n-len(b), frameChunk)
		if len(b)+k > cap(b) {
			c := min(n, 2*cap(b)+frameChunk)
			if cl, ok := recvPool.Class(n); ok && c == n {
				c = 1 << cl // the last growth: a pooled class
			}
			grown := make([]byte, len(b), c)
			copy(grown, b)
			b = grown
		}
		b = b[:len(b)+k]
		if err := fr.read(b[len(b)-k:]); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (fr *frameReader) release() {
	for range fr.tokens {
		<-fr.t.budget
	}
	fr.tokens = 0
}

// decodeIdentity decodes a heartbeat frame's sender identity.
func decodeIdentity(b []byte) (*NodeIdentity, error) {
	if len(b) < 18 {
		return nil, fmt.Errorf("%w: truncated identity", errBadFrame)
	}
	id := &NodeIdentity{}
	copy(id.Directory[:], b)
	n := int(binary.BigEndian.Uint16(b[16:]))
	b = b[18:]
	if len(b) != n*24 {
		return nil, fmt.Errorf("%w: identity claims %d voters in %d bytes", errBadFrame, n, len(b))
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
	return id, nil
}

// heardWithin reports whether a frame from peer arrived within d.
func (t *tcpTransport) heardWithin(peer uint64, d time.Duration) bool {
	v, ok := t.lastHeard.Load(peer)
	return ok && time.Since(v.(time.Time)) < d
}

func (t *tcpTransport) heardAllWithin(d time.Duration) bool {
	all, now := true, time.Now()
	t.lastHeard.Range(func(_, v any) bool {
		all = now.Sub(v.(time.Time)) < d
		return all
	})
	return all
}

func (t *tcpTransport) stats() TransportStats {
	st := TransportStats{FramesSent: t.framesSent.Load(), MessagesSent: t.msgsSent.Load(), Dropped: t.dropped.Load(), Reconnects: t.reconnects.Load(),
		RefusedBy: make(map[string]int64, numRefusals)}
	for i := range t.refused {
		n := t.refused[i].Load()
		st.Refused += n
		st.RefusedBy[refusalNames[i]] = n
	}
	st.QueueFullBy = make(map[string]int64, numKinds)
	for i := range t.queueFull {
		st.QueueFullBy[kindNames[i]] = t.queueFull[i].Load()
	}
	return st
}

func (t *tcpTransport) close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	close(t.done)
	if t.ln != nil {
		t.ln.Close()
	}
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
}
