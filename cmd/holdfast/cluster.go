package main

import (
	"fmt"
	"strconv"
	"strings"
)

// parsePeers reads --peers: "1@host:port,2@host:port,...".
func parsePeers(s string) (map[int32]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[int32]string{}
	for _, e := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(e), "@")
		n, err := strconv.ParseInt(id, 10, 32)
		if !ok || err != nil || n <= 0 || addr == "" {
			return nil, fmt.Errorf("--peers entry %q: want id@host:port", e)
		}
		if _, dup := out[int32(n)]; dup {
			return nil, fmt.Errorf("--peers: node %d listed twice", n)
		}
		out[int32(n)] = addr
	}
	return out, nil
}
