package wire

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// spliceHandler answers Fetch with two partitions whose records are file
// ranges, spliced in by the writer.
type spliceHandler struct {
	testHandler
	f        *os.File
	data     []byte
	noFd     bool
	released atomic.Int32
}

func (h *spliceHandler) Versions(l *Listener, key int16) (int16, int16, bool) {
	if key == kmsg.Fetch.Int16() {
		return 4, 16, true
	}
	return h.testHandler.Versions(l, key)
}

func (h *spliceHandler) Handle(ctx context.Context, r *Request) Reply {
	req, ok := r.Body.(*kmsg.FetchRequest)
	if !ok {
		return h.testHandler.Handle(ctx, r)
	}
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	sp := &Spliced{Response: resp, Release: func() { h.released.Add(1) }}
	t := kmsg.NewFetchResponseTopic()
	t.Topic = "t"
	for i, rg := range [][2]int{{100, 5000}, {7000, 70000}} {
		p := kmsg.NewFetchResponseTopicPartition()
		p.Partition = int32(i)
		ph := NewPlaceholder()
		p.RecordBatches = ph
		fd := h.f.Fd()
		if h.noFd {
			fd = 0
		}
		sp.Placeholders = append(sp.Placeholders, ph)
		sp.Ranges = append(sp.Ranges, FileRange{Fd: fd, Off: int64(rg[0]), Len: rg[1], ReadAt: h.f.ReadAt})
		t.Partitions = append(t.Partitions, p)
	}
	resp.Topics = append(resp.Topics, t)
	return Respond(sp)
}

func TestSplicedFileRanges(t *testing.T) {
	data := make([]byte, 100000)
	rand.New(rand.NewSource(1)).Read(data)
	path := filepath.Join(t.TempDir(), "seg")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, noFd := range []bool{false, true} {
		h := &spliceHandler{f: f, data: data, noFd: noFd}
		s := NewServer(h, Limits{}, nil)
		addr := serve(t, s)
		c := dial(t, addr)
		for i, v := range []int16{4, 11, 12, 16} { // classic and flexible encodings
			req := kmsg.NewPtrFetchRequest()
			c.Write(frame(req, v, int32(i)))
			b := readFrame(t, c)
			resp := kmsg.NewPtrFetchResponse()
			resp.SetVersion(v)
			body := b[4:]
			if v >= 12 {
				body = body[1:] // response header tags
			}
			if err := resp.ReadFrom(body); err != nil {
				t.Fatalf("v%d (fd %v): decoding the spliced response: %v", v, !noFd, err)
			}
			for j, want := range [][]byte{data[100:5100], data[7000:77000]} {
				if got := resp.Topics[0].Partitions[j].RecordBatches; !bytes.Equal(got, want) {
					t.Fatalf("v%d partition %d: %d bytes, not the file range", v, j, len(got))
				}
			}
		}
		// Release runs right after the write, so the client may see the
		// response a moment before it.
		for deadline := time.Now().Add(5 * time.Second); h.released.Load() < 4 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if got := h.released.Load(); got != 4 {
			t.Fatalf("released %d of 4 spliced responses", got)
		}
	}
}
