package wire

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceHandler answers every Produce with an empty response, after the
// handler has seen the records: what the frame path costs without a log.
type produceHandler struct{}

func (produceHandler) Versions(_ *Listener, key int16) (int16, int16, bool) {
	if key == kmsg.Produce.Int16() {
		return 3, 9, true
	}
	return 0, 0, false
}

func (produceHandler) Handle(_ context.Context, r *Request) Reply {
	req := r.Body.(*kmsg.ProduceRequest)
	n := 0
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			n += len(p.Records)
		}
	}
	// The frame may be reused once the reply is written (nothing here
	// keeps the records); the check keeps this benchmark compiling
	// against the wire package from before RecycleFrame existed.
	if rf, ok := any(r).(interface{ RecycleFrame() }); ok {
		rf.RecycleFrame()
	}
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	return Respond(resp)
}

// BenchmarkReadFrame: produce frames of a given size over loopback into a
// server whose handler only looks at them: the cost of reading, decoding
// and answering a frame, and the garbage it leaves (B/op, allocs/op count
// both ends). -benchmem is implied. The client keeps at most 5 requests in
// flight, as a Kafka producer with idempotence does.
func BenchmarkReadFrame(b *testing.B) {
	for _, size := range []int{16 << 10, 256 << 10, 1 << 20, 3 << 20} {
		b.Run(fmt.Sprintf("frame=%dKiB", size>>10), func(b *testing.B) {
			benchReadFrame(b, size)
		})
	}
}

func benchReadFrame(b *testing.B, size int) {
	b.ReportAllocs()
	s := NewServer(produceHandler{}, Limits{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 1000
	t := kmsg.NewProduceRequestTopic()
	t.Topic = "t"
	p := kmsg.NewProduceRequestTopicPartition()
	p.Records = make([]byte, size)
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	f := frame(req, 7, 1)
	b.SetBytes(int64(len(f)))
	// The process's CPU (user + system) per byte of frames: client and
	// server together, so what the server saves shows against the same
	// client work.
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	defer func() {
		b.StopTimer()
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
		b.ReportMetric(float64(cpu)/float64(b.N*len(f)), "cpu-ns/B")
	}()
	// At most 5 requests in flight, as a Kafka producer with idempotence
	// has (max.in.flight.requests.per.connection).
	inflight := make(chan struct{}, 5)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // responses
		defer wg.Done()
		var sz [4]byte
		buf := make([]byte, 1024)
		for i := 0; i < b.N; i++ {
			if _, err := io.ReadFull(c, sz[:]); err != nil {
				b.Error(err)
				return
			}
			n := int(binary.BigEndian.Uint32(sz[:]))
			if n > len(buf) {
				buf = make([]byte, n)
			}
			if _, err := io.ReadFull(c, buf[:n]); err != nil {
				b.Error(err)
				return
			}
			<-inflight
		}
	}()
	for i := 0; i < b.N; i++ {
		inflight <- struct{}{}
		if _, err := c.Write(f); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
}
