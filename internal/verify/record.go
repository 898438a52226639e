// Package verify checks a Kafka-compatible log for lost, duplicated,
// reordered and corrupted records, as a client sees it.
//
// A Run produces records that carry everything the check needs: the run
// id, the producer, its sequence and a checksum. Every acknowledgement is
// kept (partition and offset). At the end the records are read back,
// directly (Check) or through a consumer group (GroupConsumer), and a
// Tally compares what was read with what was acknowledged: lost
// (acknowledged, never read), duplicated, reordered (a producer's sequence
// going back in one partition), corrupt (checksum), misplaced (read at
// another offset than acknowledged), and stored but never acknowledged.
//
// It is the checker of the fault tests (internal/faulttest), of `holdfast
// verify` and of `holdfast lab`; it speaks only the Kafka protocol (franz-go),
// so it checks any Kafka-compatible cluster.
package verify

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"strconv"
)

// ID names one record: the producer that wrote it and its sequence in that
// producer's stream.
type ID struct {
	Producer int
	Seq      int64
}

func (id ID) String() string { return fmt.Sprintf("p%d/%d", id.Producer, id.Seq) }

// Ack is where the broker said a record went.
type Ack struct {
	Partition int32
	Offset    int64 // NoOffset when the producer learns none (acks=0)
}

// NoOffset is the offset of an acknowledgement that names none: acks=0
// answers nothing, the client only knows it wrote the record. (-1 is what
// a broker's success without an offset looks like: a bad acknowledgement.)
const NoOffset = -2

// magic starts every value of this format; the version is in it.
const magic = "hfv1|"

// MinSize is the smallest value Value writes: the header with the longest
// run id, producer and sequence.
const MinSize = len(magic) + 12 + 1 + 10 + 1 + 19 + 1 + 8 + 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Value encodes id as a record value of at least size bytes:
//
//	hfv1|<run>|<producer>|<seq>|<crc32c>|<padding>
//
// The CRC-32C (8 hex digits) covers the key, then the value with the
// checksum field written as 00000000, so a changed key, header or padding
// is caught. Text, so that `holdfast consume` shows it readably.
func Value(run string, id ID, key []byte, size int) []byte {
	v := make([]byte, 0, max(size, 64))
	v = append(v, magic...)
	v = append(v, run...)
	v = append(v, '|')
	v = strconv.AppendInt(v, int64(id.Producer), 10)
	v = append(v, '|')
	v = strconv.AppendInt(v, id.Seq, 10)
	v = append(v, '|')
	at := len(v)
	v = append(v, "00000000|"...)
	// Padding that depends on the sequence, so that a record swapped for
	// another of the same length fails the checksum too.
	for i := 0; len(v) < size; i++ {
		v = append(v, 'a'+byte((id.Seq+int64(i))%26))
	}
	sum := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, v)
	hex.Encode(v[at:at+8], []byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
	return v
}

// Status is what Parse makes of a record.
type Status int

const (
	Valid   Status = iota // a record of this run, checksum good
	Foreign               // not written by verify, or by another run
	Corrupt               // this format, but the checksum or a field is wrong
)

// Parse decodes a record written by Value for run.
func Parse(run string, key, value []byte) (ID, Status) {
	if !bytes.HasPrefix(value, []byte(magic)) {
		return ID{}, Foreign
	}
	f := bytes.SplitN(value[len(magic):], []byte("|"), 5)
	if len(f) < 5 {
		return ID{}, Corrupt
	}
	if string(f[0]) != run {
		// Another run's record, unless the run id itself was damaged:
		// the checksum says which.
		if !checksumOK(key, value, f) {
			return ID{}, Corrupt
		}
		return ID{}, Foreign
	}
	p, err1 := strconv.Atoi(string(f[1]))
	s, err2 := strconv.ParseInt(string(f[2]), 10, 64)
	if err1 != nil || err2 != nil || p < 0 || s < 0 || !checksumOK(key, value, f) {
		return ID{}, Corrupt
	}
	return ID{p, s}, Valid
}

func checksumOK(key, value []byte, f [][]byte) bool {
	if len(f[3]) != 8 {
		return false
	}
	var want [4]byte
	if _, err := hex.Decode(want[:], f[3]); err != nil {
		return false
	}
	at := len(magic) + len(f[0]) + len(f[1]) + len(f[2]) + 3
	v := bytes.Clone(value)
	copy(v[at:at+8], "00000000")
	sum := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, v)
	return sum == uint32(want[0])<<24|uint32(want[1])<<16|uint32(want[2])<<8|uint32(want[3])
}

// NewRunID returns a random 12-character run id.
func NewRunID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
