// Package freeport picks loopback ports for servers that must be told
// their address before they bind it: a new cluster's Raft peers, a
// process started with --listen. A port from 127.0.0.1:0 comes from the
// kernel's ephemeral range, where the next outgoing connection of any
// process may take it before the server binds it ("address already in
// use" under parallel tests). These ports come from below that range, at
// random, and are checked free.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the bottom of the range ports are picked from.
const lowest = 20000

// Port returns a loopback TCP port that was free a moment ago and is not
// one the kernel hands out to outgoing connections.
func Port() (int, error) {
	top := ephemeralLow() - 1
	if top <= lowest {
		return kernelPort()
	}
	for range 200 {
		p := lowest + rand.IntN(top-lowest+1)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		return p, nil
	}
	return 0, errors.New("freeport: no free port below the ephemeral range after 200 tries")
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
