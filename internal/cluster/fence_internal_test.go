package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestControllerGone: the heartbeat errors that say the controller is
// stopping or gone (a refused dial to its closed listener, a closed
// connection, NOT_CONTROLLER, none elected) are told from those of a
// controller that is there and failed or refused the fence.
func TestControllerGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, refused := net.Dial("tcp", addr)
	if refused == nil {
		t.Skip("a closed port accepted a connection")
	}
	for _, c := range []struct {
		err  error
		gone bool
	}{
		{refused, true},
		{fmt.Errorf("reading: %w", net.ErrClosed), true},
		{kerr.NotController, true},
		{errNoController, true},
		{context.DeadlineExceeded, false},
		{context.Canceled, false},
		{kerr.BrokerIDNotRegistered, false},
		{errors.New("controller not registered yet"), false},
	} {
		if got := controllerGone(c.err); got != c.gone {
			t.Errorf("controllerGone(%v) = %v, want %v", c.err, got, c.gone)
		}
	}
}
