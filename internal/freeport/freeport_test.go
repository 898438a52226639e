package freeport

import (
	"net"
	"testing"
)

func TestPortIsBindableAndBelowEphemeral(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 20 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if low > lowest+1 && (p < lowest || p >= low) {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, low)
		}
		seen[p] = true
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s not bindable: %v", a, err)
		}
		ln.Close()
	}
	if len(seen) < 10 {
		t.Fatalf("20 picks gave only %d distinct ports: not random", len(seen))
	}
}
