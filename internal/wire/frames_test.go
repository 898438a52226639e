package wire

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// keepHandler keeps the records of every produce whose records start with
// 'K' (and does not recycle those frames); it recycles all others.
type keepHandler struct{ kept chan []byte }

func (keepHandler) Versions(_ *Listener, key int16) (int16, int16, bool) {
	return produceHandler{}.Versions(nil, key)
}

func (h keepHandler) Handle(_ context.Context, r *Request) Reply {
	req := r.Body.(*kmsg.ProduceRequest)
	recs := req.Topics[0].Partitions[0].Records
	if recs[0] == 'K' {
		h.kept <- recs
	} else {
		r.RecycleFrame()
	}
	return Respond(req.ResponseKind())
}

// TestKeptFrameIsNotReused: a frame whose handler did not call
// RecycleFrame is never handed to a later request, while recycled ones are
// (the later requests, of the same size, would overwrite it).
func TestKeptFrameIsNotReused(t *testing.T) {
	h := keepHandler{kept: make(chan []byte, 1)}
	s := NewServer(h, Limits{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c := dial(t, serve(t, s))
	defer c.Close()
	send := func(fill byte) {
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		tp := kmsg.NewProduceRequestTopic()
		tp.Topic = "t"
		p := kmsg.NewProduceRequestTopicPartition()
		p.Records = bytes.Repeat([]byte{fill}, 100<<10)
		tp.Partitions = append(tp.Partitions, p)
		req.Topics = append(req.Topics, tp)
		if _, err := c.Write(frame(req, 7, 1)); err != nil {
			t.Fatal(err)
		}
		readFrame(t, c)
	}
	send('K')
	kept := <-h.kept
	reusedBefore := FramesRecycled()
	for i := 0; i < 20; i++ {
		send(byte('a' + i))
	}
	if !bytes.Equal(kept, bytes.Repeat([]byte{'K'}, 100<<10)) {
		t.Fatal("the records a handler kept were overwritten by a later request")
	}
	if FramesRecycled() == reusedBefore {
		t.Fatal("recycled frames never reached the pool")
	}
}

// checkHandler answers a produce after checking that its records are one
// byte repeated (the frame's buffer held nothing of an earlier request),
// and recycles every frame.
type checkHandler struct{ bad chan string }

func (checkHandler) Versions(_ *Listener, key int16) (int16, int16, bool) {
	return produceHandler{}.Versions(nil, key)
}

func (h checkHandler) Handle(_ context.Context, r *Request) Reply {
	req := r.Body.(*kmsg.ProduceRequest)
	recs := req.Topics[0].Partitions[0].Records
	if len(recs) == 0 || !bytes.Equal(recs, bytes.Repeat(recs[:1], len(recs))) {
		select {
		case h.bad <- "records of a frame are not what the client sent":
		default:
		}
	}
	r.RecycleFrame()
	return Respond(req.ResponseKind())
}

// TestLargeFrameFromPool: a frame larger than frameUpfront reads straight
// into a free pooled buffer of its size once there is one (no growing and
// copying), and gets exactly its own bytes.
func TestLargeFrameFromPool(t *testing.T) {
	h := checkHandler{bad: make(chan string, 1)}
	s := NewServer(h, Limits{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c := dial(t, serve(t, s))
	defer c.Close()
	send := func(fill byte, n int) {
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		tp := kmsg.NewProduceRequestTopic()
		tp.Topic = "t"
		p := kmsg.NewProduceRequestTopicPartition()
		p.Records = bytes.Repeat([]byte{fill}, n)
		tp.Partitions = append(tp.Partitions, p)
		req.Topics = append(req.Topics, tp)
		if _, err := c.Write(frame(req, 7, 1)); err != nil {
			t.Fatal(err)
		}
		readFrame(t, c)
	}
	send('a', 3<<20) // grows (or finds a pooled buffer another test left)
	grown := framesGrown.Load()
	for i := range 6 {
		send(byte('b'+i), 3<<20-i*1000)
	}
	if g := framesGrown.Load() - grown; g != 0 {
		t.Fatalf("frames of 3 MiB grew their buffer %d times with a pooled one free", g)
	}
	send('x', 200<<10) // smaller frames still work after large ones
	select {
	case msg := <-h.bad:
		t.Fatal(msg)
	default:
	}
}

// TestPoisonFrames: with poisoning on (as in every test that starts a
// broker), a frame put back is overwritten at once, so a holder that reads
// it after its release cannot read valid bytes.
func TestPoisonFrames(t *testing.T) {
	SetPoisonFrames(true)
	defer SetPoisonFrames(false)
	b := getFrame(4096)[:100]
	copy(b, "a record batch")
	putFrame(b)
	for i, c := range b[:cap(b)] {
		if c != 0xdb {
			t.Fatalf("byte %d of a put-back frame is %#x, want the poison 0xdb", i, c)
		}
	}
}
