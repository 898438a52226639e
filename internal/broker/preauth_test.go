package broker_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// TestUnauthenticatedFramesDoNotStallClients is issue 25's measurement as
// a test: connections that never authenticate announce 100 MiB frames on
// the SASL listener and stream their bytes, while an authenticated
// client (SCRAM) produces and consumes. The big frames are refused from
// their size (the connections closed long before 100 MiB went out), the
// shared request budget never holds more than the client's own small
// requests, and the client's records all arrive. Before
// sasl.server.max.receive.size the frames were read whole into
// queued.max.request.bytes (four of them took the admin's 3-record
// round trip from 0.04 s to 25 s).
func TestUnauthenticatedFramesDoNotStallClients(t *testing.T) {
	s := newSecureSetup(t)
	n, _ := startSecureNode(t, s)
	ctx := testCtx(t)
	addr := n.Addrs["SASL"]
	srv := n.Server()
	admin := scramClient(t, addr, "admin", adminPass)
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "p"); err != nil {
		t.Fatal(err)
	}

	const attackers, announced = 4, 100 << 20
	type result struct {
		sent int
		err  error
	}
	results := make([]result, attackers)
	var wg sync.WaitGroup
	for i := range attackers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				results[i].err = err
				return
			}
			defer c.Close()
			results[i].sent, results[i].err = stream(c, announced)
		}()
	}

	// The authenticated client meanwhile: 3 records in, the same 3 out.
	for i := range 3 {
		if err := admin.ProduceSync(ctx, &kgo.Record{Topic: "p", Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	consumer := scramClient(t, addr, "admin", adminPass, kgo.ConsumeTopics("p"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for len(got) < 3 {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if fmt.Sprint(got) != "[v0 v1 v2]" {
		t.Fatalf("consumed %v", got)
	}

	wg.Wait()
	for i, r := range results {
		if r.err == nil || r.sent >= announced {
			t.Errorf("attacker %d: sent %d of %d bytes unauthenticated (err %v): the frame was read, not refused", i, r.sent, announced, r.err)
		}
	}
	if got := srv.Stats.PreAuthRefused.Load(); got < attackers {
		t.Errorf("refused pre-authentication frames: %d, want %d", got, attackers)
	}
	// The clients' own requests are small: 1 MiB is far below any one
	// of the big frames' share, had they been read.
	if m := srv.MemoryPool(); m.UsedPeak > 1<<20 || m.PreAuthPeak > 1<<20 {
		t.Errorf("request memory held at most %d bytes (shared) and %d (before authentication): the unauthenticated frames were read", m.UsedPeak, m.PreAuthPeak)
	}

	// A PLAIN client is served as well after all that.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(plain.Auth{User: "plainuser", Pass: "plain-secret"}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("PLAIN client after the attack: %v", err)
	}
}

// stream announces a frame of size bytes on c and writes its body until
// the server closes the connection or all of it went out.
func stream(c net.Conn, size int) (int, error) {
	if _, err := c.Write(binary.BigEndian.AppendUint32(nil, uint32(size))); err != nil {
		return 0, err
	}
	chunk := make([]byte, 64<<10)
	c.SetWriteDeadline(time.Now().Add(2 * time.Minute))
	sent := 0
	for sent < size {
		k, err := c.Write(chunk[:min(len(chunk), size-sent)])
		sent += k
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}
