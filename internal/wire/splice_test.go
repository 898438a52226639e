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

	"holdfast/internal/testwait"
)

// spliceHandler answers Fetch with two partitions whose records are file
// ranges, spliced in by the writer.
type spliceHandler struct {
	testHandler
	f        *os.File
	data     []byte
	noFd     bool
	mem      bool // the ranges' bytes in memory (a read cache), in two parts
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
		fr := FileRange{Fd: fd, Off: int64(rg[0]), Len: rg[1], ReadAt: h.f.ReadAt}
		if h.mem {
			lo, mid, hi := rg[0], rg[0]+rg[1]/3, rg[0]+rg[1]
			fr.Fd, fr.Mem = 0, [][]byte{h.data[lo:mid], h.data[mid:hi]}
			fr.ReadAt = func([]byte, int64) (int, error) { return 0, os.ErrInvalid } // must not be used
		}
		sp.Ranges = append(sp.Ranges, fr)
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
	for _, mode := range []string{"sendfile", "readat", "mem"} {
		noFd := mode != "sendfile"
		h := &spliceHandler{f: f, data: data, noFd: noFd, mem: mode == "mem"}
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
				t.Fatalf("v%d (%s): decoding the spliced response: %v", v, mode, err)
			}
			for j, want := range [][]byte{data[100:5100], data[7000:77000]} {
				if got := resp.Topics[0].Partitions[j].RecordBatches; !bytes.Equal(got, want) {
					t.Fatalf("v%d (%s) partition %d: %d bytes, not the file range", v, mode, j, len(got))
				}
			}
		}
		// Release runs right after the write, so the client may see the
		// response a moment before it.
		testwait.Poll(5*time.Second, func() bool { return h.released.Load() >= 4 })
		if got := h.released.Load(); got != 4 {
			t.Fatalf("released %d of 4 spliced responses", got)
		}
	}
}

// TestFlattenMem: a connection that cannot sendfile (TLS) joins the parts
// into one buffer; a range held in memory is copied from its parts.
func TestFlattenMem(t *testing.T) {
	fail := func([]byte, int64) (int, error) { return 0, os.ErrInvalid }
	parts := []part{{b: []byte("head|")}, {f: &FileRange{Len: 7, ReadAt: fail, Mem: [][]byte{[]byte("abc"), []byte("defg")}}}, {b: []byte("|tail")}}
	got, err := flatten(parts)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "head|abcdefg|tail" {
		t.Fatalf("flattened %q", got)
	}
}
