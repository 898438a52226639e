package raft

import (
	"encoding/binary"
	"errors"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
)

// Raft index and Kafka offset are two coordinates. A data entry is one
// Kafka record batch, stored in the partition log at its base offset.
// Every other entry — a new leader's empty entry, a membership change, an
// application command (a log-start marker) — is a side entry: it takes no
// Kafka offset and is never written into the partition log, so Kafka
// clients never see it. Side entries live in the node's journal with the
// offset they sit at (the end of the data before them); see store.go.

// cmdPrefix starts the data of a command entry. A data entry's data is a
// record batch whose first byte is the top byte of its base offset, which
// is 0 for any offset below 2^56; a command's first byte is 0xff.
var cmdPrefix = []byte{0xff, 'h', 'f', 'c'}

// ErrNotData: a proposal that is not a record batch (its first bytes are
// a command's).
var ErrNotData = errors.New("raft: proposal is not a record batch")

// isDataEntry reports whether e is a Kafka record batch (stored in the log).
func isDataEntry(e *pb.Entry) bool {
	return e.GetType() == pb.EntryType_EntryNormal && len(e.Data) > 0 && !isCommand(e.Data)
}

func isCommand(data []byte) bool {
	return len(data) >= len(cmdPrefix) && string(data[:len(cmdPrefix)]) == string(cmdPrefix)
}

// commandOf returns the application payload of a command entry.
func commandOf(e *pb.Entry) ([]byte, bool) {
	if e.GetType() != pb.EntryType_EntryNormal || !isCommand(e.Data) {
		return nil, false
	}
	return e.Data[len(cmdPrefix):], true
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
