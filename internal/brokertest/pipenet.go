package brokertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
)

// PipeNet is an in-memory network for Kafka connections between the
// brokers and clients of one process: listeners by address, and a dialer
// (kgo.Dialer, broker.Config.Dialer) that connects to them over net.Pipe.
// A connection blocked on it is blocked on a channel, which a
// testing/synctest bubble counts as durably blocked (a socket is not): a
// cluster on a PipeNet and a raft.MemNetwork can run in a bubble, on its
// fake clock.
type PipeNet struct {
	mu   sync.Mutex
	lns  map[string]*pipeListener
	next int // the next port handed out
}

// NewPipeNet returns an empty network.
func NewPipeNet() *PipeNet { return &PipeNet{lns: map[string]*pipeListener{}, next: 10000} }

// Addr hands out a new address (127.0.0.1 and a port no listener of this
// network had).
func (p *PipeNet) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.next))
}

// Listen listens on addr, which no open listener of this network holds.
func (p *PipeNet) Listen(addr string) (net.Listener, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lns[addr] != nil {
		return nil, fmt.Errorf("pipenet: listen %s: address in use", addr)
	}
	l := &pipeListener{p: p, addr: ta, conns: make(chan net.Conn), done: make(chan struct{})}
	p.lns[addr] = l
	return l, nil
}

// Dial connects to the listener on addr; network is ignored (tcp).
func (p *PipeNet) Dial(ctx context.Context, _, addr string) (net.Conn, error) {
	p.mu.Lock()
	l := p.lns[addr]
	p.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: errors.New("connection refused")}
	}
	client, server := net.Pipe()
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p.port()}
	select {
	case l.conns <- &pipeConn{Conn: server, local: l.addr, remote: local}:
		return &pipeConn{Conn: client, local: local, remote: l.addr}, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: errors.New("connection refused")}
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

// port is a client connection's port: the server side sees 127.0.0.1
// and a port, as from TCP.
func (p *PipeNet) port() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	return p.next
}

type pipeListener struct {
	p     *PipeNet
	addr  *net.TCPAddr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.p.mu.Lock()
		if l.p.lns[l.addr.String()] == l {
			delete(l.p.lns, l.addr.String())
		}
		l.p.mu.Unlock()
	})
	return nil
}

func (l *pipeListener) Addr() net.Addr { return l.addr }

// pipeConn is one end of a net.Pipe with TCP addresses.
type pipeConn struct {
	net.Conn
	local, remote *net.TCPAddr
}

func (c *pipeConn) LocalAddr() net.Addr  { return c.local }
func (c *pipeConn) RemoteAddr() net.Addr { return c.remote }
