package raft

import (
	"bufio"
	"bytes"
	"fmt"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// BenchmarkMsgAppFrame: one frame of appends (8 groups, 4 entries each)
// encoded by the sender, copied once (as the kernel does), and read and
// decoded by the receiver, whose buffers are then given back (as the
// groups do once the entries are applied). The sizes: a produce batch of a few records,
// one of the RF=3 benchmark's, and a large one.
//
//	go test -run - -bench MsgAppFrame -count 8 ./internal/raft | benchstat -
func BenchmarkMsgAppFrame(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("entry=%d", size), func(b *testing.B) {
			var batch []outMsg
			for g := range 8 {
				m := &pb.Message{Type: pb.MessageType_MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)),
					Term: new(uint64(3)), LogTerm: new(uint64(3)), Index: new(uint64(100)), Commit: new(uint64(99))}
				for i := range 4 {
					m.Entries = append(m.Entries, testEntry(uint64(101+i), size, pb.EntryType_EntryNormal))
				}
				batch = append(batch, outMsg{group: uint64(g), m: m})
			}
			tr := &tcpTransport{id: 1, budget: make(chan struct{}, maxInboundBytes/frameChunk), done: make(chan struct{})}
			tr.setIdentity(NodeIdentity{Cluster: [16]byte{7}})
			var wire bytes.Buffer
			codec := newBenchCodec(tr)
			b.SetBytes(int64(8 * 4 * size))
			b.ReportAllocs()
			for b.Loop() {
				wire.Reset()
				codec.send(batch, &wire)
				got := codec.receive(bufio.NewReaderSize(&wire, 64<<10))
				if len(got) != len(batch) {
					b.Fatalf("%d messages", len(got))
				}
				// What the groups hold is let go (applied, out of
				// recent): a received buffer goes back to its pool.
				releaseBatch(got)
			}
		})
	}
}
