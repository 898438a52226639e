package broker_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// FuzzHandlers sends arbitrary decodable requests of every served API to a
// real broker: whatever the values (negative counts, huge partition numbers,
// null names), a handler must answer or refuse, never panic, and its
// response must encode.
//
//	go test ./internal/broker -run X -fuzz FuzzHandlers -fuzztime 60s
func FuzzHandlers(f *testing.F) {
	n := brokertest.Start(f, func(c *broker.Config, _ *wire.Limits) { c.NumPartitions = 2 })
	n.CreateTopic("t", 2, nil)
	seed := func(req kmsg.Request) {
		for v := int16(0); v <= req.MaxVersion(); v++ {
			if _, max, ok := n.B.Versions(nil, req.Key()); !ok || v > max {
				continue
			}
			req.SetVersion(v)
			f.Add(binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, uint16(req.Key())), uint16(v)), req.AppendTo(nil))
		}
	}
	for k := int16(0); k <= kmsg.MaxKey; k++ {
		if _, _, ok := n.B.Versions(nil, k); ok {
			seed(kmsg.RequestForKey(k))
		}
	}
	f.Fuzz(func(t *testing.T, head, body []byte) {
		if len(head) < 4 {
			return
		}
		key, version := int16(binary.BigEndian.Uint16(head)), int16(binary.BigEndian.Uint16(head[2:]))
		minV, maxV, ok := n.B.Versions(nil, key)
		if !ok || version < minV || version > maxV {
			return // the wire layer closes the connection for these
		}
		req := kmsg.RequestForKey(key)
		req.SetVersion(version)
		if req.ReadFrom(body) != nil {
			return // undecodable: the wire layer closes the connection
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			reply := n.B.Handle(ctx, &wire.Request{Key: key, Version: version, Body: req, Conn: &wire.Conn{}})
			if resp := reply(ctx); resp != nil {
				resp.SetVersion(version)
				resp.AppendTo(nil)
				if sp, ok := resp.(*wire.Spliced); ok && sp.Release != nil {
					sp.Release()
				}
			}
		}()
		// A reply must give up when its connection goes (ctx); one that
		// does not would pin a connection's writer. The bound is generous:
		// this is a hang detector, not a timing assertion.
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s v%d still running 20s after its context ended: %+v", kmsg.NameForKey(key), version, req)
		}
	})
}
