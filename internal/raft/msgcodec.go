package raft

import (
	"errors"
	"fmt"
	"net"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"
)

// The transport's own protobuf codec for raftpb.Message. The bytes on the
// wire are plain protobuf (a node of an older version reads them with
// proto.Unmarshal and gets the same message), but the hot part, entry
// data, is never copied by a marshaller or an unmarshaller:
//
//   - sending, a message's fields other than its entries are marshalled by
//     protobuf, then each entry is written by hand after them (field 7 may
//     come last: protobuf merges a repeated field wherever it appears), and
//     an entry's data of at least inlineData bytes is not copied at all: the
//     frame goes out with writev, the data straight from the batch bytes
//     Raft holds;
//   - receiving, every message of a frame is read into its own buffer, and
//     its entries' Data are slices of that buffer (the follower's log
//     appends from them, and the store's recent entries keep them): one
//     allocation per message instead of one per entry, and no copy. A
//     message holds one group's entries only, so what the recent entries
//     keep alive is that group's own bytes.
//
// Anything unusual (groups, unknown fields, an entry type this version
// does not know) goes through proto.Unmarshal, so the result is always
// what proto.Unmarshal would give.

// inlineData: entry data shorter than this is copied into the frame
// header buffer rather than written as its own piece (a writev piece
// costs about what copying a kilobyte does).
const inlineData = 1 << 10

// frameEncoder builds frames; one per sender, reused.
type frameEncoder struct {
	buf  []byte // the frame but the referenced data
	refs []ref  // data written from its own slice, at buf positions
	vec  net.Buffers
}

type ref struct {
	pos  int
	data []byte
}

// reset starts a frame.
func (fe *frameEncoder) reset() {
	fe.buf = fe.buf[:0]
	clear(fe.refs) // do not keep batch bytes alive
	fe.refs = fe.refs[:0]
	clear(fe.vec)
	fe.vec = fe.vec[:0]
}

// size is the length of the frame built so far.
func (fe *frameEncoder) size() int {
	n := len(fe.buf)
	for _, r := range fe.refs {
		n += len(r.data)
	}
	return n
}

// appendMessage appends m, encoded as protobuf, and returns its length.
func (fe *frameEncoder) appendMessage(m *pb.Message) (int, error) {
	start, refStart := len(fe.buf), len(fe.refs)
	if len(m.Entries) == 0 || len(m.ProtoReflect().GetUnknown()) > 0 {
		var err error
		if fe.buf, err = (proto.MarshalOptions{}).MarshalAppend(fe.buf, m); err != nil {
			return 0, err
		}
		return len(fe.buf) - start, nil
	}
	head := &pb.Message{
		Type: m.Type, To: m.To, From: m.From, Term: m.Term, LogTerm: m.LogTerm, Index: m.Index,
		Commit: m.Commit, Vote: m.Vote, Snapshot: m.Snapshot, Reject: m.Reject, RejectHint: m.RejectHint,
		Context: m.Context, Responses: m.Responses,
	}
	var err error
	if fe.buf, err = (proto.MarshalOptions{}).MarshalAppend(fe.buf, head); err != nil {
		return 0, err
	}
	for _, e := range m.Entries {
		if len(e.ProtoReflect().GetUnknown()) > 0 {
			b, err := proto.Marshal(e)
			if err != nil {
				return 0, err
			}
			fe.buf = protowire.AppendTag(fe.buf, 7, protowire.BytesType)
			fe.buf = protowire.AppendBytes(fe.buf, b)
			continue
		}
		fe.buf = protowire.AppendTag(fe.buf, 7, protowire.BytesType)
		fe.buf = protowire.AppendVarint(fe.buf, uint64(entrySize(e)))
		if e.Type != nil {
			fe.buf = protowire.AppendTag(fe.buf, 1, protowire.VarintType)
			fe.buf = protowire.AppendVarint(fe.buf, uint64(int64(*e.Type)))
		}
		if e.Term != nil {
			fe.buf = protowire.AppendTag(fe.buf, 2, protowire.VarintType)
			fe.buf = protowire.AppendVarint(fe.buf, *e.Term)
		}
		if e.Index != nil {
			fe.buf = protowire.AppendTag(fe.buf, 3, protowire.VarintType)
			fe.buf = protowire.AppendVarint(fe.buf, *e.Index)
		}
		if e.Data != nil {
			fe.buf = protowire.AppendTag(fe.buf, 4, protowire.BytesType)
			fe.buf = protowire.AppendVarint(fe.buf, uint64(len(e.Data)))
			if len(e.Data) < inlineData {
				fe.buf = append(fe.buf, e.Data...)
			} else {
				fe.refs = append(fe.refs, ref{len(fe.buf), e.Data})
			}
		}
	}
	n := len(fe.buf) - start
	for _, r := range fe.refs[refStart:] {
		n += len(r.data)
	}
	return n, nil
}

// entrySize is the protobuf size of e (without unknown fields).
func entrySize(e *pb.Entry) int {
	n := 0
	if e.Type != nil {
		n += 1 + protowire.SizeVarint(uint64(int64(*e.Type)))
	}
	if e.Term != nil {
		n += 1 + protowire.SizeVarint(*e.Term)
	}
	if e.Index != nil {
		n += 1 + protowire.SizeVarint(*e.Index)
	}
	if e.Data != nil {
		n += 1 + protowire.SizeBytes(len(e.Data))
	}
	return n
}

// buffers returns the frame as pieces for writev; valid until reset.
func (fe *frameEncoder) buffers() net.Buffers {
	clear(fe.vec)
	fe.vec = fe.vec[:0]
	prev := 0
	for _, r := range fe.refs {
		fe.vec = append(fe.vec, fe.buf[prev:r.pos], r.data)
		prev = r.pos
	}
	fe.vec = append(fe.vec, fe.buf[prev:])
	return fe.vec
}

var errBadMessage = errors.New("raft: malformed message")

// decodeMessage decodes a protobuf raftpb.Message from b. Entry data are
// slices of b (b must not change afterwards); the rest is what
// proto.Unmarshal gives.
func decodeMessage(b []byte) (*pb.Message, error) {
	// First pass: check the fields and count the entries, so that they
	// and their scalars come from one allocation.
	count, restLo, restHi, contiguous := 0, -1, -1, true
	for p := b; len(p) > 0; {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return nil, fmt.Errorf("%w: %v", errBadMessage, protowire.ParseError(n))
		}
		k := protowire.ConsumeFieldValue(num, typ, p[n:])
		if k < 0 {
			return nil, fmt.Errorf("%w: field %d: %v", errBadMessage, num, protowire.ParseError(k))
		}
		if num == 7 && typ == protowire.BytesType {
			count++
		} else if off := len(b) - len(p); restLo < 0 {
			restLo, restHi = off, off+n+k
		} else {
			contiguous = contiguous && off == restHi
			restHi = off + n + k
		}
		p = p[n+k:]
	}
	var rest []byte // the fields other than entries, as they came
	switch {
	case restLo < 0:
	case contiguous:
		rest = b[restLo:restHi] // proto.Unmarshal copies what it keeps
	default:
		for p := b; len(p) > 0; {
			num, typ, n := protowire.ConsumeTag(p)
			k := protowire.ConsumeFieldValue(num, typ, p[n:])
			if num != 7 || typ != protowire.BytesType {
				rest = append(rest, p[:n+k]...)
			}
			p = p[n+k:]
		}
	}
	m := &pb.Message{}
	if len(rest) > 0 {
		if err := proto.Unmarshal(rest, m); err != nil {
			return nil, fmt.Errorf("%w: %v", errBadMessage, err)
		}
	}
	if count == 0 {
		return m, nil
	}
	boxes := make([]entryBox, count)
	ents := make([]*pb.Entry, 0, count)
	for p := b; len(p) > 0; {
		num, typ, n := protowire.ConsumeTag(p)
		k := protowire.ConsumeFieldValue(num, typ, p[n:])
		if num == 7 && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(p[n:])
			e, err := boxes[len(ents)].decode(v)
			if err != nil {
				return nil, err
			}
			ents = append(ents, e)
		}
		p = p[n+k:]
	}
	m.Entries = append(m.Entries, ents...)
	return m, nil
}

// entryBox holds an entry and what its pointer fields point at.
type entryBox struct {
	e           pb.Entry
	term, index uint64
	typ         pb.EntryType
}

// decode decodes one entry into x, its Data a slice of b; an entry with
// anything this version does not know goes through proto.Unmarshal.
func (x *entryBox) decode(b []byte) (*pb.Entry, error) {
	e := &x.e
	for p := b; len(p) > 0; {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return nil, fmt.Errorf("%w: entry: %v", errBadMessage, protowire.ParseError(n))
		}
		p = p[n:]
		switch {
		case num >= 1 && num <= 3 && typ == protowire.VarintType:
			v, k := protowire.ConsumeVarint(p)
			if k < 0 {
				return nil, fmt.Errorf("%w: entry: %v", errBadMessage, protowire.ParseError(k))
			}
			p = p[k:]
			switch num {
			case 1:
				x.typ = pb.EntryType(int32(v))
				if _, known := pb.EntryType_name[int32(x.typ)]; !known {
					return slowEntry(b) // proto2: an unknown enum value is an unknown field
				}
				e.Type = &x.typ
			case 2:
				x.term = v
				e.Term = &x.term
			case 3:
				x.index = v
				e.Index = &x.index
			}
		case num == 4 && typ == protowire.BytesType:
			v, k := protowire.ConsumeBytes(p)
			if k < 0 {
				return nil, fmt.Errorf("%w: entry data: %v", errBadMessage, protowire.ParseError(k))
			}
			e.Data = v[:len(v):len(v)]
			p = p[k:]
		default:
			return slowEntry(b)
		}
	}
	return e, nil
}

func slowEntry(b []byte) (*pb.Entry, error) {
	e := &pb.Entry{}
	if err := proto.Unmarshal(b, e); err != nil {
		return nil, fmt.Errorf("%w: entry: %v", errBadMessage, err)
	}
	return e, nil
}
