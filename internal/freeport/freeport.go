// Package freeport picks loopback ports for servers that must be told
// their address before they bind it: a new cluster's Raft peers, a
// process started with --listen. A port from 127.0.0.1:0 comes from the
// kernel's ephemeral range, where the next outgoing connection of any
// process may take it before the server binds it ("address already in
// use" under parallel tests). These ports come from below that range.
//
// A port checked free is not reserved: a stopped node's port is free until
// the node restarts on it, and another process picking ports meanwhile
// could take it (or hand it to a node of its own that then fails to
// bind). So each process takes a block of the range for itself, locked by
// listening on the block's first port for as long as the process lives,
// and hands out only the block's other ports, in turn, each checked free:
// two processes never pick the same port, and within one process a port
// comes round again only after the whole block.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the bottom of the range ports are picked from.
const lowest = 20000

// blockSize is how many ports of the range a process takes: its lock and
// blockSize-1 ports to hand out.
const blockSize = 256

var (
	mu    sync.Mutex
	own   *block // this process's block; nil until the first Port
	noOwn bool   // no block was free: pick at random from the whole range
)

// block is a run of ports [first, first+blockSize) held by lock, a
// listener on first that no other process can open while this one lives.
type block struct {
	first int
	lock  net.Listener
	next  int // the next port handed out is first+1+next
}

// Port returns a loopback TCP port that was free a moment ago, is not one
// the kernel hands out to outgoing connections, and is not handed out by
// another process using this package.
func Port() (int, error) {
	top := ephemeralLow() - 1
	if top-lowest+1 < 2*blockSize {
		return kernelPort()
	}
	mu.Lock()
	defer mu.Unlock()
	if own == nil && !noOwn {
		if b, err := reserve(lowest, top); err == nil {
			own = b
		} else {
			noOwn = true
		}
	}
	if own != nil {
		for range blockSize - 1 {
			p := own.first + 1 + own.next
			own.next = (own.next + 1) % (blockSize - 1)
			if free(p) {
				return p, nil
			}
		}
		return 0, fmt.Errorf("freeport: every port of the block %d-%d is in use", own.first+1, own.first+blockSize-1)
	}
	for range 200 {
		if p := lowest + rand.IntN(top-lowest+1); free(p) {
			return p, nil
		}
	}
	return 0, errors.New("freeport: no free port below the ephemeral range after 200 tries")
}

// reserve locks a block of [low, top] that no other process holds,
// trying the blocks in random order.
func reserve(low, top int) (*block, error) {
	n := (top - low + 1) / blockSize
	for _, i := range rand.Perm(n) {
		first := low + i*blockSize
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(first)))
		if err != nil {
			continue
		}
		return &block{first: first, lock: ln}, nil
	}
	return nil, fmt.Errorf("freeport: every block of %d-%d is held", low, top)
}

func free(p int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// Addr is Port as "127.0.0.1:port".
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// ephemeralLow is the bottom of the kernel's ephemeral port range (Linux;
// IANA's 49152 elsewhere).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 49152
}

func kernelPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("freeport: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
