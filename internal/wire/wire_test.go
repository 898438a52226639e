package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/testwait"
)

// testHandler serves ApiVersions and Metadata; a Metadata request whose
// first topic is "slow" answers after a delay, to test response ordering.
type testHandler struct{}

func (testHandler) Versions(_ *Listener, key int16) (int16, int16, bool) {
	switch key {
	case kmsg.ApiVersions.Int16():
		return 0, 4, true
	case kmsg.Metadata.Int16():
		return 0, 12, true
	}
	return 0, 0, false
}

func (h testHandler) Handle(_ context.Context, r *Request) Reply {
	switch req := r.Body.(type) {
	case *kmsg.ApiVersionsRequest:
		resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
		resp.ApiKeys = SupportedKeys(h, r.Conn.Listener)
		return Respond(resp)
	case *kmsg.MetadataRequest:
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		resp.ClusterID = kmsg.StringPtr("test")
		first := ""
		if len(req.Topics) > 0 && req.Topics[0].Topic != nil {
			first = *req.Topics[0].Topic
		}
		slow := first == "slow"
		if first == "panic" {
			panic("a bug in a handler")
		}
		if first == "throttle" {
			r.Conn.Throttle(throttleFor)
		}
		return func(ctx context.Context) kmsg.Response {
			if first == "panic-reply" {
				panic("a bug in a reply")
			}
			if slow {
				select {
				case <-time.After(200 * time.Millisecond):
				case <-ctx.Done():
				}
				resp.ClusterID = kmsg.StringPtr("slow")
			}
			return resp
		}
	}
	panic("unexpected request")
}

func startServer(t *testing.T, lim Limits) (*Server, string) {
	t.Helper()
	s := NewServer(testHandler{}, lim, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return s, serve(t, s)
}

// serve runs s on a free loopback port until the test ends.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String()
}

// frame encodes a request the way a client does: size, header v1/v2, body.
func frame(req kmsg.Request, version int16, corr int32) []byte {
	req.SetVersion(version)
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "test"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func readFrame(t *testing.T, r io.Reader) []byte {
	t.Helper()
	var sz [4]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		t.Fatalf("read response size: %v", err)
	}
	b := make([]byte, binary.BigEndian.Uint32(sz[:]))
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatalf("read response: %v", err)
	}
	return b
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// expectClosed asserts the server closes c without answering.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if err == nil || n > 0 {
		t.Fatalf("connection still open (read %d bytes, err %v)", n, err)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("server did not close the connection")
	}
}

// expectServing asserts a real client still gets answers from the server.
func expectServing(t *testing.T, addr string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl); err != nil {
		t.Fatalf("server stopped serving others: %v", err)
	}
}

func TestBadFramesCloseOnlyThatConnection(t *testing.T) {
	cases := map[string][]byte{
		"oversized":                    {0x7f, 0xff, 0xff, 0xff},
		"negative length":              {0xff, 0xff, 0xff, 0xfe},
		"too short":                    {0, 0, 0, 3, 1, 2, 3},
		"unknown api key":              append([]byte{0, 0, 0, 10, 0x7f, 0x00, 0, 0, 0, 0, 0, 1}, 0xff, 0xff),
		"garbage body":                 append([]byte{0, 0, 0, 16, 0, 3, 0, 12, 0, 0, 0, 1, 0, 0}, 0xde, 0xad, 0xbe, 0xef, 0xff, 0xff),
		"unsupported metadata version": append([]byte{0, 0, 0, 10, 0, 3, 0x10, 0, 0, 0, 0, 1}, 0xff, 0xff),
		"client id past frame":         append([]byte{0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1}, 0x7f, 0xff),
	}
	s, addr := startServer(t, Limits{MaxRequestBytes: 1 << 20})
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			bystander := dial(t, addr) // an innocent connection opened before the bad one
			c := dial(t, addr)
			if _, err := c.Write(raw); err != nil {
				t.Fatal(err)
			}
			expectClosed(t, c)
			bystander.Write(frame(kmsg.NewPtrApiVersionsRequest(), 3, 9))
			resp := readFrame(t, bystander)
			if corr := int32(binary.BigEndian.Uint32(resp)); corr != 9 {
				t.Fatalf("bystander got correlation id %d", corr)
			}
			expectServing(t, addr)
		})
	}
	if got := s.Stats.BadFrames.Load(); got < int64(len(cases)) {
		t.Fatalf("bad frames counted %d, want >= %d", got, len(cases))
	}
}

func TestUnsupportedApiVersionsDowngrade(t *testing.T) {
	_, addr := startServer(t, Limits{})
	c := dial(t, addr)
	// Version 9 is beyond both kmsg and the handler: the answer must be a
	// v0 response with UNSUPPORTED_VERSION and ApiVersions' own range
	// only (KIP-511), so the client retries rather than taking this as the
	// key table.
	req := kmsg.NewPtrApiVersionsRequest()
	raw := frame(req, 3, 77)
	binary.BigEndian.PutUint16(raw[6:], 9)
	c.Write(raw)
	b := readFrame(t, c)
	if corr := int32(binary.BigEndian.Uint32(b)); corr != 77 {
		t.Fatalf("correlation id %d", corr)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	if err := resp.ReadFrom(b[4:]); err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("error code %d, want UNSUPPORTED_VERSION", resp.ErrorCode)
	}
	if len(resp.ApiKeys) != 1 || resp.ApiKeys[0].ApiKey != 18 || resp.ApiKeys[0].MaxVersion != 4 {
		t.Fatalf("api keys %+v", resp.ApiKeys)
	}
	// The connection stays usable for the retry at a supported version.
	c.Write(frame(kmsg.NewPtrApiVersionsRequest(), 3, 78))
	b = readFrame(t, c)
	if corr := int32(binary.BigEndian.Uint32(b)); corr != 78 {
		t.Fatalf("correlation id %d", corr)
	}
}

func TestPipelinedResponsesKeepRequestOrder(t *testing.T) {
	_, addr := startServer(t, Limits{})
	c := dial(t, addr)
	slow := kmsg.NewPtrMetadataRequest()
	slow.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("slow")}}
	w := bufio.NewWriter(c)
	w.Write(frame(slow, 12, 1))
	for i := int32(2); i <= 20; i++ {
		w.Write(frame(kmsg.NewPtrMetadataRequest(), 12, i))
	}
	w.Flush()
	for want := int32(1); want <= 20; want++ {
		b := readFrame(t, c)
		if corr := int32(binary.BigEndian.Uint32(b)); corr != want {
			t.Fatalf("response %d has correlation id %d: order broken", want, corr)
		}
	}
}

// throttleFor is how long a Metadata request for topic "throttle" mutes its
// connection.
const throttleFor = 2 * time.Second

// TestThrottleMutesOnlyThatConnection: KIP-219's mute. The throttled
// request's own response goes out at once; the connection's next request
// is handled only after the throttle, while another connection is served
// meanwhile.
func TestThrottleMutesOnlyThatConnection(t *testing.T) {
	_, addr := startServer(t, Limits{})
	a, b := dial(t, addr), dial(t, addr)
	thr := kmsg.NewPtrMetadataRequest()
	thr.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("throttle")}}
	start := time.Now()
	a.Write(append(frame(thr, 12, 1), frame(kmsg.NewPtrMetadataRequest(), 12, 2)...))
	if corr := int32(binary.BigEndian.Uint32(readFrame(t, a))); corr != 1 {
		t.Fatalf("first response has correlation id %d", corr)
	}
	// The other connection is not muted: it is answered while a waits.
	b.Write(frame(kmsg.NewPtrMetadataRequest(), 12, 7))
	got := make(chan int32, 2)
	go func() {
		var sz [4]byte
		if _, err := io.ReadFull(a, sz[:]); err == nil {
			got <- 2
		}
	}()
	if corr := int32(binary.BigEndian.Uint32(readFrame(t, b))); corr != 7 {
		t.Fatalf("other connection: correlation id %d", corr)
	}
	got <- 7
	if first := <-got; first != 7 {
		t.Fatal("the muted connection's next request was answered before another connection's")
	}
	<-got
	// Noise can only make this later, never earlier.
	if took := time.Since(start); took < throttleFor {
		t.Fatalf("second request answered %v after the throttled one; the throttle was %v", took, throttleFor)
	}
}

func TestMaxConnections(t *testing.T) {
	s, addr := startServer(t, Limits{MaxConnections: 2})
	a, b := dial(t, addr), dial(t, addr)
	for _, c := range []net.Conn{a, b} { // make sure both are accepted
		c.Write(frame(kmsg.NewPtrApiVersionsRequest(), 3, 1))
		readFrame(t, c)
	}
	expectClosed(t, dial(t, addr))
	if s.Stats.Rejected.Load() != 1 {
		t.Fatalf("rejected %d", s.Stats.Rejected.Load())
	}
	a.Close()
	// The slot frees once the server notices the close.
	testwait.Poll(5*time.Second, func() bool { return s.Stats.Open.Load() <= 1 })
	c := dial(t, addr)
	c.Write(frame(kmsg.NewPtrApiVersionsRequest(), 3, 5))
	readFrame(t, c)
}

func TestSilentAndStalledClientsAreClosed(t *testing.T) {
	_, addr := startServer(t, Limits{IdleTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond})
	expectClosed(t, dial(t, addr)) // connects and sends nothing
	c := dial(t, addr)
	c.Write([]byte{0, 0, 0, 100, 0, 18}) // starts a frame, never finishes it
	expectClosed(t, c)
	expectServing(t, addr)
}

// FuzzDecode feeds arbitrary frames to the request decoder: it must return a
// request or an error, never panic, and a decoded request re-encodes.
func FuzzDecode(f *testing.F) {
	for _, v := range []int16{0, 3, 4} {
		f.Add(frame(kmsg.NewPtrApiVersionsRequest(), v, 1)[4:])
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("t")}}
	for _, v := range []int16{1, 9, 12} {
		f.Add(frame(md, v, 2)[4:])
	}
	f.Add([]byte{0, 18, 0, 9, 0, 0, 0, 1, 0xff, 0xff})
	c := &serverConn{s: NewServer(testHandler{}, Limits{}, nil), info: &Conn{}, listener: DefaultListener()}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 8 {
			return // the read loop refuses these before decode
		}
		req, err := c.decode(b)
		if err != nil {
			return
		}
		if req.Body != nil {
			req.Body.AppendTo(nil)
		}
	})
}

// TestThousandsOfStalledConnections: 2000 connections that each start a
// frame and stall (slowloris) neither stop a real client from being served
// nor make the server hold more than the frames' header bytes.
func TestThousandsOfStalledConnections(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 8192 && lim.Max >= 8192 {
		lim.Cur = 8192
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	const conns = 2000
	s, addr := startServer(t, Limits{MaxRequestBytes: 1 << 20, ReadTimeout: time.Minute, MaxConnectionsPerIP: UnlimitedPerIP})
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := 0; i < conns; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Skipf("could only open %d connections here: %v", i, err)
		}
		open = append(open, c)
		// A frame that announces 1 MiB and sends 6 bytes of it.
		c.Write([]byte{0, 0x10, 0, 0, 0, 18})
	}
	testwait.Poll(20*time.Second, func() bool { return s.Stats.Open.Load() >= conns })
	if got := s.Stats.Open.Load(); got < conns {
		t.Fatalf("server holds %d of %d connections", got, conns)
	}
	expectServing(t, addr)
	// Each stalled frame reserved its announced size in the shared budget;
	// the budget (256 MiB by default) is what bounds memory, so 2000 x 1 MiB
	// announced frames must have left readers waiting instead of allocating.
	s.budget.mu.Lock()
	avail := s.budget.avail
	s.budget.mu.Unlock()
	if avail < 0 {
		t.Fatalf("budget overdrawn: %d", avail)
	}
}

// TestHandlerPanicClosesOnlyThatConnection: a handler that panics, in
// Handle or in its Reply, closes its own connection and is counted; the
// server keeps serving everyone else.
func TestHandlerPanicClosesOnlyThatConnection(t *testing.T) {
	s, addr := startServer(t, Limits{MaxRequestBytes: 1 << 20})
	for i, topic := range []string{"panic", "panic-reply"} {
		bystander := dial(t, addr)
		c := dial(t, addr)
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		if _, err := c.Write(frame(req, 9, 1)); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, c)
		bystander.Write(frame(kmsg.NewPtrApiVersionsRequest(), 3, 9))
		if corr := int32(binary.BigEndian.Uint32(readFrame(t, bystander))); corr != 9 {
			t.Fatalf("bystander got correlation id %d", corr)
		}
		expectServing(t, addr)
		if got := s.Stats.Panics.Load(); got != int64(i+1) {
			t.Fatalf("panics counted %d, want %d", got, i+1)
		}
	}
}
