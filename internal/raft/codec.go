package raft

import (
	"encoding/binary"
	"errors"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/records"
)

// Control record types of the batches that carry Raft-internal entries.
// Kafka consumers skip control batches; 0 and 1 are transaction markers
// (which the broker proposes as ordinary data), 2 is KRaft's LeaderChange.
// The conf change types are Holdfast's own, above KRaft's range.
const (
	ctrlLeaderChange  int16 = 2
	ctrlConfChange    int16 = 0x4801
	ctrlConfChangeV2  int16 = 0x4802
	controlKeyVersion int16 = 0
)

// ErrRaftControl: a proposal that looks like a Raft-internal control batch.
var ErrRaftControl = errors.New("raft: batch is a Raft-internal control batch")

// controlType returns the control record type of a control batch, or -1.
func controlType(h records.Header, batch []byte) int16 {
	if !h.IsControl() || h.NumRecords != 1 {
		return -1
	}
	recs, err := records.Records(batch)
	if err != nil || len(recs) != 1 || len(recs[0].Key) < 4 {
		return -1
	}
	return int16(binary.BigEndian.Uint16(recs[0].Key[2:4]))
}

func isRaftControl(t int16) bool {
	return t == ctrlLeaderChange || t == ctrlConfChange || t == ctrlConfChangeV2
}

// entryBatch turns a Raft entry into the record batch stored at base with
// epoch term. Data entries are the batch itself (already stamped by the
// leader); the rest become one-record control batches, deterministic so
// that every replica stores the same bytes.
func entryBatch(e *pb.Entry, base int64) ([]byte, error) {
	typ := e.GetType()
	if typ == pb.EntryType_EntryNormal && len(e.Data) > 0 {
		return e.Data, nil
	}
	ct := ctrlLeaderChange
	switch typ {
	case pb.EntryType_EntryConfChange:
		ct = ctrlConfChange
	case pb.EntryType_EntryConfChangeV2:
		ct = ctrlConfChangeV2
	}
	key := binary.BigEndian.AppendUint16(nil, uint16(controlKeyVersion))
	key = binary.BigEndian.AppendUint16(key, uint16(ct))
	return records.Build(records.Batch{
		ProducerID:           -1,
		ProducerEpoch:        -1,
		BaseSequence:         -1,
		Control:              true,
		PartitionLeaderEpoch: int32(e.GetTerm()),
		BaseOffset:           base,
	}, []records.Record{{Offset: base, Key: key, Value: e.Data}})
}

// batchEntry is the inverse of entryBatch.
func batchEntry(h records.Header, batch []byte, index uint64) (*pb.Entry, error) {
	e := &pb.Entry{Index: new(index), Term: new(uint64(max(h.PartitionLeaderEpoch, 0)))}
	if !h.IsControl() {
		e.Type = pb.EntryType_EntryNormal.Enum()
		e.Data = batch
		return e, nil
	}
	recs, err := records.Records(batch)
	if err != nil {
		return nil, fmt.Errorf("raft: control batch at %d: %w", h.BaseOffset, err)
	}
	ct := int16(-1)
	if len(recs) == 1 && len(recs[0].Key) >= 4 {
		ct = int16(binary.BigEndian.Uint16(recs[0].Key[2:4]))
	}
	switch ct {
	case ctrlLeaderChange:
		e.Type = pb.EntryType_EntryNormal.Enum()
	case ctrlConfChange:
		e.Type = pb.EntryType_EntryConfChange.Enum()
		e.Data = recs[0].Value
	case ctrlConfChangeV2:
		e.Type = pb.EntryType_EntryConfChangeV2.Enum()
		e.Data = recs[0].Value
	default: // a transaction marker: data like any other
		e.Type = pb.EntryType_EntryNormal.Enum()
		e.Data = batch
	}
	return e, nil
}

// snapshotData encodes the only thing a snapshot says: the log starts at
// offset (everything below is gone, by retention or DeleteRecords).
func snapshotData(offset int64) []byte {
	return binary.BigEndian.AppendUint64([]byte("hfsnap1"), uint64(offset))
}

func parseSnapshotData(b []byte) (int64, error) {
	if len(b) != 15 || string(b[:7]) != "hfsnap1" {
		return 0, fmt.Errorf("raft: snapshot data of %d bytes is not a log-start snapshot", len(b))
	}
	return int64(binary.BigEndian.Uint64(b[7:])), nil
}
