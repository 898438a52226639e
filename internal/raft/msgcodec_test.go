package raft

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"
)

func testEntry(idx uint64, size int, typ pb.EntryType) *pb.Entry {
	e := &pb.Entry{Index: new(idx), Term: new(uint64(3)), Type: typ.Enum()}
	if size >= 0 {
		e.Data = make([]byte, size)
		for i := range e.Data {
			e.Data[i] = byte(int(idx) + i)
		}
	}
	return e
}

// codecMessages covers what the transport carries: appends with entries
// of every size class (inline, written in place, empty, absent), the
// other message kinds, and fields the encoder leaves to protobuf.
func codecMessages() []*pb.Message {
	app := &pb.Message{Type: pb.MessageType_MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)),
		LogTerm: new(uint64(3)), Index: new(uint64(9)), Commit: new(uint64(8))}
	for i, size := range []int{100, inlineData - 1, inlineData, 64 << 10, 0, -1, 3 << 20} {
		app.Entries = append(app.Entries, testEntry(uint64(10+i), size, pb.EntryType_EntryNormal))
	}
	conf := &pb.Message{Type: pb.MessageType_MsgApp.Enum(), To: new(uint64(2)), Entries: []*pb.Entry{
		testEntry(20, 40, pb.EntryType_EntryConfChangeV2), testEntry(21, 2000, pb.EntryType_EntryConfChange), {}}}
	snap := &pb.Message{Type: pb.MessageType_MsgSnap.Enum(), To: new(uint64(3)), Snapshot: &pb.Snapshot{
		Data: snapshotData(77), Metadata: &pb.SnapshotMetadata{Index: new(uint64(5)), Term: new(uint64(2)),
			ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}}
	resp := &pb.Message{Type: pb.MessageType_MsgAppResp.Enum(), To: new(uint64(1)), Reject: new(true), RejectHint: new(uint64(4)),
		Context: []byte("ctx"), Vote: new(uint64(2)), Responses: []*pb.Message{{Type: pb.MessageType_MsgHeartbeat.Enum()}},
		Entries: []*pb.Entry{testEntry(1, 5000, pb.EntryType_EntryNormal)}}
	unknown := &pb.Message{Type: pb.MessageType_MsgApp.Enum(), Entries: []*pb.Entry{testEntry(30, 4096, pb.EntryType_EntryNormal)}}
	unknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 5))
	unknownEntry := &pb.Message{Type: pb.MessageType_MsgApp.Enum(), Entries: []*pb.Entry{testEntry(31, 4096, pb.EntryType_EntryNormal)}}
	unknownEntry.Entries[0].ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))
	return []*pb.Message{app, conf, snap, resp, unknown, unknownEntry, heartbeat(2, 7), {}}
}

func encodeOne(t testing.TB, m *pb.Message) []byte {
	var fe frameEncoder
	n, err := fe.appendMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	vec := fe.buffers()
	vec.WriteTo(&out)
	if out.Len() != n {
		t.Fatalf("appendMessage said %d bytes, wrote %d", n, out.Len())
	}
	return out.Bytes()
}

// TestMessageCodecMatchesProtobuf: what the encoder writes is protobuf
// that proto.Unmarshal reads as the message sent (an older node reads a
// newer one), and decodeMessage reads both its own encoding and
// proto.Marshal's as the same message (a newer node reads an older one).
func TestMessageCodecMatchesProtobuf(t *testing.T) {
	for i, m := range codecMessages() {
		enc := encodeOne(t, m)
		var old pb.Message
		if err := proto.Unmarshal(enc, &old); err != nil {
			t.Fatalf("message %d: proto.Unmarshal of the new encoding: %v", i, err)
		}
		if !proto.Equal(&old, m) {
			t.Fatalf("message %d: proto.Unmarshal of the new encoding differs:\n%v\n%v", i, &old, m)
		}
		std, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range [][]byte{enc, std} {
			got, err := decodeMessage(b)
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			if !proto.Equal(got, m) {
				t.Fatalf("message %d: decoded differently:\n%v\n%v", i, got, m)
			}
		}
	}
}

// TestEntryDataNotCopied: the received entries' data point into the
// message's buffer, with no room to grow into the bytes after them.
func TestEntryDataNotCopied(t *testing.T) {
	m := codecMessages()[0]
	b := encodeOne(t, m)
	got, err := decodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range got.Entries {
		if len(e.Data) == 0 {
			continue
		}
		if i := bytes.Index(b, e.Data); i < 0 || &b[i] != &e.Data[0] {
			t.Fatalf("entry %d: data copied out of the message buffer", e.GetIndex())
		}
		if cap(e.Data) != len(e.Data) {
			t.Fatalf("entry %d: data has cap %d for %d bytes", e.GetIndex(), cap(e.Data), len(e.Data))
		}
	}
	// The encoder wrote the large entries from their own bytes.
	var fe frameEncoder
	if _, err := fe.appendMessage(m); err != nil {
		t.Fatal(err)
	}
	var large []*pb.Entry
	for _, e := range m.Entries {
		if len(e.Data) >= inlineData {
			large = append(large, e)
		}
	}
	if len(fe.refs) != len(large) {
		t.Fatalf("%d entries written in place, want %d", len(fe.refs), len(large))
	}
	for i, r := range fe.refs {
		if &r.data[0] != &large[i].Data[0] {
			t.Fatalf("piece %d is not the entry's own bytes", i)
		}
	}
}

// TestMessageCodecFieldsKnown: the encoder copies a message's fields by
// name; a raftpb with a field it does not know must fail here, not lose
// the field on the wire.
func TestMessageCodecFieldsKnown(t *testing.T) {
	if n := (&pb.Message{}).ProtoReflect().Descriptor().Fields().Len(); n != 14 {
		t.Fatalf("raftpb.Message has %d fields; frameEncoder.appendMessage copies 14", n)
	}
	if n := (&pb.Entry{}).ProtoReflect().Descriptor().Fields().Len(); n != 4 {
		t.Fatalf("raftpb.Entry has %d fields; the codec knows 4", n)
	}
}

// TestMessageCodecMalformed: every truncation and a sample of corruptions
// of an encoded message decode exactly when proto.Unmarshal does, never
// panic, and decode to what it gives.
func TestMessageCodecMalformed(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, m := range codecMessages()[:4] {
		enc := encodeOne(t, m)
		step := max(1, len(enc)/3000)
		for n := 0; n < len(enc); n += step {
			checkLikeProtobuf(t, enc[:n])
		}
		for range 300 {
			b := bytes.Clone(enc[:min(len(enc), 20000)])
			for range 1 + rng.IntN(4) {
				b[rng.IntN(len(b))] = byte(rng.Uint32())
			}
			checkLikeProtobuf(t, b)
		}
	}
	// An entry type this version does not know: what protobuf makes of it.
	e := protowire.AppendTag(nil, 1, protowire.VarintType)
	e = protowire.AppendVarint(e, 9)
	checkLikeProtobuf(t, protowire.AppendBytes(protowire.AppendTag(nil, 7, protowire.BytesType), e))
}

func checkLikeProtobuf(t testing.TB, b []byte) {
	t.Helper()
	var want pb.Message
	werr := proto.Unmarshal(b, &want)
	got, err := decodeMessage(b)
	if (err == nil) != (werr == nil) {
		t.Fatalf("decodeMessage(%x): err %v, proto.Unmarshal: %v", b[:min(len(b), 64)], err, werr)
	}
	if err == nil && !proto.Equal(got, &want) {
		t.Fatalf("decodeMessage(%x) = %v, proto.Unmarshal: %v", b[:min(len(b), 64)], got, &want)
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for _, m := range codecMessages() {
		if b := encodeOne(f, m); len(b) < 8<<10 {
			f.Add(b)
		}
	}
	small := &pb.Message{Type: pb.MessageType_MsgApp.Enum(), Entries: []*pb.Entry{testEntry(1, 10, pb.EntryType_EntryNormal), testEntry(2, 0, pb.EntryType_EntryConfChange)}}
	f.Add(encodeOne(f, small))
	f.Fuzz(func(t *testing.T, b []byte) { checkLikeProtobuf(t, b) })
}

// frameBytes is the wire form of a frame of msgs from node 1.
func frameBytes(t testing.TB, msgs []outMsg) []byte {
	tr := &tcpTransport{id: 1}
	tr.setIdentity(NodeIdentity{Cluster: [16]byte{7}, Bootstrap: map[uint64][16]byte{1: {1}}})
	var fe frameEncoder
	if err := tr.encode(&fe, msgs); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	vec := fe.buffers()
	vec.WriteTo(&out)
	return out.Bytes()
}

// readFrames reads frames from b as node 2's connection reader does,
// until the first error; the shared budget must be whole again afterwards.
func readFrames(t testing.TB, b []byte) ([]frame, error) {
	tr := &tcpTransport{id: 2, budget: make(chan struct{}, maxInboundBytes/frameChunk), done: make(chan struct{})}
	r := bufio.NewReader(bytes.NewReader(b))
	var out []frame
	var err error
	for {
		var hdr [4]byte
		if _, err = io.ReadFull(r, hdr[:]); err != nil {
			break
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n < frameHeader || n > maxFrame {
			err = fmt.Errorf("frame length %d", n)
			break
		}
		var f frame
		if f, err = tr.readFrame(r, int(n), nil); err != nil {
			break
		}
		out = append(out, f)
	}
	if len(tr.budget) != 0 {
		t.Fatalf("%d budget chunks still taken", len(tr.budget))
	}
	return out, err
}

func TestFrameRoundTrip(t *testing.T) {
	msgs := codecMessages()
	var batch []outMsg
	for i, m := range msgs {
		m.From, m.To = new(uint64(1)), new(uint64(2)) // node 1's frame to node 2
		batch = append(batch, outMsg{group: uint64(100 + i), m: m})
	}
	wire := append(frameBytes(t, nil), frameBytes(t, batch)...)
	frames, err := readFrames(t, wire)
	if err != io.EOF || len(frames) != 2 {
		t.Fatalf("read %d frames, then %v", len(frames), err)
	}
	if id := frames[0].ident; id == nil || id.Bootstrap[1] != [16]byte{1} || frames[0].from != 1 {
		t.Fatalf("heartbeat frame: %+v", frames[0])
	}
	got := frames[1].msgs
	if len(got) != len(batch) || frames[1].cluster != [16]byte{7} {
		t.Fatalf("frame: %d messages, cluster %x", len(got), frames[1].cluster)
	}
	for i := range got {
		if got[i].group != batch[i].group || !proto.Equal(got[i].m, batch[i].m) {
			t.Fatalf("message %d: %d %v, sent %d %v", i, got[i].group, got[i].m, batch[i].group, batch[i].m)
		}
	}
	// Every truncation is an error (never a panic, never a frame).
	step := max(1, len(wire)/2000)
	for n := 0; n < len(wire); n += step {
		frames, err := readFrames(t, wire[:n])
		if err == nil || len(frames) > 1 || (len(frames) == 1 && n < len(wire)) && frames[0].ident == nil {
			t.Fatalf("truncated at %d: %d frames, %v", n, len(frames), err)
		}
	}
}

// FuzzReadFrame: any bytes on a peer connection are frames or an error,
// never a panic, and what reading them allocates is bounded by what came
// (plus the one buffer of at most frameChunk a frame's announced message
// may take before its bytes arrive). Seeds in testdata/fuzz/FuzzReadFrame:
// frames of every message kind, an identity heartbeat, and headers that
// announce more than they carry.
func FuzzReadFrame(f *testing.F) {
	small := &pb.Message{Type: pb.MessageType_MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Entries: []*pb.Entry{testEntry(1, 10, pb.EntryType_EntryNormal)}}
	f.Add(frameBytes(f, nil))
	f.Add(frameBytes(f, []outMsg{{group: 1, m: small}, {group: 2, m: heartbeat(2, 1)}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		frames, _ := readFrames(t, b)
		runtime.ReadMemStats(&after)
		if got, bound := after.TotalAlloc-before.TotalAlloc, uint64(256*len(b)+4*frameChunk); got > bound {
			t.Fatalf("%d bytes of input allocated %d bytes (bound %d)", len(b), got, bound)
		}
		for _, fr := range frames {
			for _, m := range fr.msgs {
				if m.m == nil {
					t.Fatal("nil message")
				}
				if m.m.GetFrom() != fr.from || m.m.GetTo() != 2 {
					t.Fatalf("a message from %d to %d in a frame of node %d to node 2", m.m.GetFrom(), m.m.GetTo(), fr.from)
				}
			}
		}
	})
}

// TestTransportBadFrameClosesThatConnection: a malformed or truncated
// frame closes the connection it came on and nothing else; what a good
// peer sends still arrives, large entries byte for byte.
func TestTransportBadFrameClosesThatConnection(t *testing.T) {
	rb := &recorder{}
	b := plainTransport(t, 2, rb)
	ra := &recorder{}
	a := plainTransport(t, 1, ra)
	b.addPeer(1, a.addr())
	good := frameBytes(t, []outMsg{{group: 1, m: heartbeat(2, 1)}})
	bad := bytes.Clone(good)
	bad = append(bad[:len(bad)-3], 0xff, 0xff, 0xff) // the message's last field: a broken varint
	truncated := good[:len(good)-5]
	for name, wire := range map[string][]byte{"malformed message": bad, "truncated frame": truncated} {
		c, err := net.Dial("tcp", b.addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(wire)
		if name == "truncated frame" {
			c.(*net.TCPConn).CloseWrite()
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("%s: connection not closed (%v)", name, err)
		}
		c.Close()
	}
	if b.stats().Refused != 1 {
		t.Fatalf("refused %d connections, want 1 (the malformed frame)", b.stats().Refused)
	}
	waitFor(t, "the budget to be given back", func() bool { return len(b.budget) == 0 })
	if rb.count() != 0 {
		t.Fatalf("%d messages delivered from bad frames", rb.count())
	}
	a.addPeer(2, b.addr())
	sendAppend(t, a, rb, 5, "delivery from a good peer")
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
