// Package records encodes, decodes and validates Kafka record batches
// (message format v2, magic 2) — the unit the log stores and the wire carries.
//
// Layout of the 61-byte batch header (big endian):
//
//	 0 baseOffset int64           8 length int32 (bytes after this field)
//	12 partitionLeaderEpoch int32 16 magic int8     17 crc uint32
//	21 attributes int16          23 lastOffsetDelta int32
//	27 firstTimestamp int64      35 maxTimestamp int64
//	43 producerId int64          51 producerEpoch int16
//	53 baseSequence int32        57 numRecords int32   61 records...
//
// The CRC-32C covers bytes 21 to the end, so baseOffset and
// partitionLeaderEpoch can be rewritten by the broker without recomputing it.
package records

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// HeaderSize is the number of bytes of the v2 batch header.
const HeaderSize = 61

// Byte positions of the header fields.
const (
	offBaseOffset      = 0
	offLength          = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offFirstTimestamp  = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offNumRecords      = 57

	// lengthPrefix is the part of the header that Length does not count.
	lengthPrefix = 12
)

// Attribute bits.
const (
	attrCodecMask     = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
	// attrDeleteHorizon (KIP-534): firstTimestamp holds the time after
	// which the log cleaner may remove the batch's tombstones (or the
	// transaction marker it is); record timestamps stay base + delta.
	attrDeleteHorizon = 0x40
)

// Sentinel errors; the returned errors wrap them with detail.
var (
	ErrCorrupt          = errors.New("corrupt record batch")
	ErrTooLarge         = errors.New("record batch too large")
	ErrUnsupportedMagic = errors.New("unsupported record batch magic")
	ErrTruncated        = errors.New("record batch truncated")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is the decoded v2 batch header.
type Header struct {
	BaseOffset           int64
	Length               int32 // bytes after the Length field
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	FirstTimestamp       int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

// Codec is the batch's compression codec.
func (h Header) Codec() Codec { return Codec(h.Attributes & attrCodecMask) }

// IsTransactional reports attribute bit 4.
func (h Header) IsTransactional() bool { return h.Attributes&attrTransactional != 0 }

// IsControl reports attribute bit 5 (commit/abort markers).
func (h Header) IsControl() bool { return h.Attributes&attrControl != 0 }

// LogAppendTime reports attribute bit 3 (timestamps are the broker's).
func (h Header) LogAppendTime() bool { return h.Attributes&attrLogAppendTime != 0 }

// DeleteHorizon returns the batch's delete horizon (unix ms) and whether it
// has one (attribute bit 6, set by the log cleaner).
func (h Header) DeleteHorizon() (int64, bool) {
	if h.Attributes&attrDeleteHorizon == 0 {
		return 0, false
	}
	return h.FirstTimestamp, true
}

// LastOffset is the offset of the batch's last record.
func (h Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// Size is the total number of bytes of the batch.
func (h Header) Size() int { return lengthPrefix + int(h.Length) }

// ParseHeader decodes the header at the start of b without checking the CRC
// or the magic.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("records: header needs %d bytes, have %d: %w", HeaderSize, len(b), ErrTruncated)
	}
	be := binary.BigEndian
	return Header{
		BaseOffset:           int64(be.Uint64(b[offBaseOffset:])),
		Length:               int32(be.Uint32(b[offLength:])),
		PartitionLeaderEpoch: int32(be.Uint32(b[offLeaderEpoch:])),
		Magic:                int8(b[offMagic]),
		CRC:                  be.Uint32(b[offCRC:]),
		Attributes:           int16(be.Uint16(b[offAttributes:])),
		LastOffsetDelta:      int32(be.Uint32(b[offLastOffsetDelta:])),
		FirstTimestamp:       int64(be.Uint64(b[offFirstTimestamp:])),
		MaxTimestamp:         int64(be.Uint64(b[offMaxTimestamp:])),
		ProducerID:           int64(be.Uint64(b[offProducerID:])),
		ProducerEpoch:        int16(be.Uint16(b[offProducerEpoch:])),
		BaseSequence:         int32(be.Uint32(b[offBaseSequence:])),
		NumRecords:           int32(be.Uint32(b[offNumRecords:])),
	}, nil
}

// Checksum computes the CRC-32C of a whole batch as stored in its header.
func Checksum(b []byte) uint32 { return crc32.Checksum(b[offAttributes:], castagnoli) }

// Validate checks that b is exactly one well-formed v2 batch of at most
// maxBytes bytes (maxBytes <= 0: no limit) with a correct CRC. It does not
// decompress; see ValidateRecords.
func Validate(b []byte, maxBytes int) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return Header{}, err
	}
	if h.Magic != 2 {
		return h, fmt.Errorf("records: magic %d: %w", h.Magic, ErrUnsupportedMagic)
	}
	if h.Length < HeaderSize-lengthPrefix {
		return h, fmt.Errorf("records: length %d below the header's %d: %w", h.Length, HeaderSize-lengthPrefix, ErrCorrupt)
	}
	if h.Size() != len(b) {
		if h.Size() > len(b) {
			return h, fmt.Errorf("records: length says %d bytes, buffer has %d: %w", h.Size(), len(b), ErrTruncated)
		}
		return h, fmt.Errorf("records: length says %d bytes, buffer has %d: %w", h.Size(), len(b), ErrCorrupt)
	}
	if maxBytes > 0 && len(b) > maxBytes {
		return h, fmt.Errorf("records: batch of %d bytes exceeds %d: %w", len(b), maxBytes, ErrTooLarge)
	}
	if got := Checksum(b); got != h.CRC {
		return h, fmt.Errorf("records: crc %08x, header says %08x: %w", got, h.CRC, ErrCorrupt)
	}
	if h.NumRecords < 0 {
		return h, fmt.Errorf("records: negative record count %d: %w", h.NumRecords, ErrCorrupt)
	}
	if h.LastOffsetDelta < 0 {
		return h, fmt.Errorf("records: negative lastOffsetDelta %d: %w", h.LastOffsetDelta, ErrCorrupt)
	}
	// Producers number records 0..n-1 (see Dense). The log cleaner keeps a
	// batch's lastOffsetDelta while removing records, so a stored batch
	// may have fewer records than offsets, never more.
	if h.NumRecords > 0 && h.LastOffsetDelta < h.NumRecords-1 {
		return h, fmt.Errorf("records: lastOffsetDelta %d with %d records: %w", h.LastOffsetDelta, h.NumRecords, ErrCorrupt)
	}
	if h.Codec() > CodecZstd {
		return h, fmt.Errorf("records: unknown codec %d: %w", h.Codec(), ErrCorrupt)
	}
	// Every record takes at least minRecordSize bytes uncompressed.
	if h.Codec() == CodecNone && int64(h.NumRecords)*minRecordSize > int64(len(b)-HeaderSize) {
		return h, fmt.Errorf("records: %d records cannot fit in %d bytes: %w", h.NumRecords, len(b)-HeaderSize, ErrCorrupt)
	}
	return h, nil
}

// Validated is one batch that Check accepted, with the header it parsed.
// The produce path checks a batch once, at the top, and hands this down:
// the layers below (the partition, the Raft host, the log) take its facts
// instead of parsing the batch or computing its CRC again. Only this
// package makes one, so holding a Validated means the checks were done
// (the zero value holds no batch and is refused where one is taken).
// Its setters rewrite the batch in place and keep the header in step;
// nothing else may change the bytes while a Validated refers to them.
type Validated struct {
	b []byte
	h Header
}

// Check is Validate returning the batch as Validated.
func Check(b []byte, maxBytes int) (Validated, error) {
	h, err := Validate(b, maxBytes)
	if err != nil {
		return Validated{}, err
	}
	return Validated{b: b, h: h}, nil
}

// Bytes is the batch (not a copy).
func (v Validated) Bytes() []byte { return v.b }

// Header is the batch's header as checked and since rewritten.
func (v Validated) Header() Header { return v.h }

// Rebind returns v's facts over b, which must be a whole copy of v's batch
// as it is now, made by code trusted to copy it (the Raft library clones
// each proposed entry: the Raft host writes that clone). It checks what
// costs nothing - the length and the header's bytes, CRC included - and
// reports false if those differ; it does not checksum or decode the body
// again, which is the point.
func (v Validated) Rebind(b []byte) (Validated, bool) {
	if len(v.b) < HeaderSize || len(b) != len(v.b) || !bytes.Equal(b[:HeaderSize], v.b[:HeaderSize]) {
		return Validated{}, false
	}
	return Validated{b: b, h: v.h}, true
}

// SetBaseOffset rewrites the batch's base offset (not covered by the CRC).
func (v *Validated) SetBaseOffset(off int64) {
	SetBaseOffset(v.b, off)
	v.h.BaseOffset = off
}

// SetLeaderEpoch rewrites the batch's leader epoch (not covered by the CRC).
func (v *Validated) SetLeaderEpoch(epoch int32) {
	SetLeaderEpoch(v.b, epoch)
	v.h.PartitionLeaderEpoch = epoch
}

// SetLogAppendTime is SetLogAppendTime on the batch (the CRC is recomputed).
func (v *Validated) SetLogAppendTime(ts int64) {
	SetLogAppendTime(v.b, ts)
	v.h.Attributes |= attrLogAppendTime
	v.h.MaxTimestamp = ts
	v.h.CRC = binary.BigEndian.Uint32(v.b[offCRC:])
}

// Dense reports whether a batch numbers its records 0..n-1 with n > 0, as
// a producer's batch must: only the log cleaner leaves gaps or empties one.
func Dense(h Header) bool { return h.NumRecords > 0 && h.LastOffsetDelta == h.NumRecords-1 }

// minRecordSize: length, attributes, timestamp delta, offset delta, key
// length, value length, header count — one byte each at least.
const minRecordSize = 7

// Next splits the first batch off buf, a concatenation of batches. It checks
// only the framing (length and magic), not the CRC.
func Next(buf []byte) (batch, rest []byte, err error) {
	if len(buf) < lengthPrefix {
		return nil, buf, fmt.Errorf("records: %d bytes, need %d for the length: %w", len(buf), lengthPrefix, ErrTruncated)
	}
	n := int32(binary.BigEndian.Uint32(buf[offLength:]))
	if n < HeaderSize-lengthPrefix {
		return nil, buf, fmt.Errorf("records: length %d below the header's %d: %w", n, HeaderSize-lengthPrefix, ErrCorrupt)
	}
	if len(buf) > offMagic && buf[offMagic] != 2 {
		return nil, buf, fmt.Errorf("records: magic %d: %w", int8(buf[offMagic]), ErrUnsupportedMagic)
	}
	size := lengthPrefix + int64(n)
	if size > int64(len(buf)) {
		return nil, buf, fmt.Errorf("records: batch of %d bytes, have %d: %w", size, len(buf), ErrTruncated)
	}
	return buf[:size:size], buf[size:], nil
}

// DropEmpty removes, in place, the batches without records from buf (whole
// batches, as a log stores them) and returns what is left and the last
// offset of the last batch it saw (-1 if none). The log cleaner leaves
// empty batches where a batch must keep its place; some clients
// (segmentio/kafka-go) stop at one, while every client steps over a gap.
func DropEmpty(buf []byte) (kept []byte, last int64, err error) {
	kept, last = buf[:0], -1
	for rest := buf; len(rest) > 0; {
		b, r, err := Next(rest)
		if err != nil {
			return nil, -1, err
		}
		h, err := ParseHeader(b)
		if err != nil {
			return nil, -1, err
		}
		last = h.LastOffset()
		if h.NumRecords > 0 {
			kept = append(kept, b...) // never ahead of b: kept is a prefix of buf
		}
		rest = r
	}
	return kept, last, nil
}

// SetBaseOffset rewrites the batch's baseOffset in place (not covered by the CRC).
func SetBaseOffset(b []byte, off int64) {
	binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(off))
}

// SetLeaderEpoch rewrites the batch's partitionLeaderEpoch in place (not covered by the CRC).
func SetLeaderEpoch(b []byte, epoch int32) {
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(epoch))
}

// SetLogAppendTime marks the batch as LogAppendTime with timestamp ts
// (message.timestamp.type=LogAppendTime) and recomputes the CRC.
func SetLogAppendTime(b []byte, ts int64) {
	be := binary.BigEndian
	attr := be.Uint16(b[offAttributes:]) | attrLogAppendTime
	be.PutUint16(b[offAttributes:], attr)
	be.PutUint64(b[offMaxTimestamp:], uint64(ts))
	be.PutUint32(b[offCRC:], Checksum(b))
}

// Record is one decoded record with its absolute offset and timestamp.
type Record struct {
	Offset    int64
	Timestamp int64
	Key       []byte // nil: null key
	Value     []byte // nil: null value (tombstone)
	Headers   []kmsg.Header
}

// Each decompresses and decodes the records of batch b (already
// Validated) and calls fn for each in order. A record's Key, Value and
// header values alias the (decompressed) batch: copy what is kept after fn.
func Each(b []byte, fn func(Record)) error {
	_, err := decode(b, fn)
	return err
}

// ValidateRecords decompresses b (one batch, already Validated) and decodes
// every record, checking that the count matches NumRecords.
func ValidateRecords(b []byte) error {
	_, err := decode(b, nil)
	return err
}

// Records decompresses and decodes all records of batch b.
func Records(b []byte) ([]Record, error) {
	var out []Record
	_, err := decode(b, func(r Record) { out = append(out, r) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// decode walks the records of b, calling fn (if not nil) for each.
func decode(b []byte, fn func(Record)) (int, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return 0, err
	}
	if h.Magic != 2 {
		return 0, fmt.Errorf("records: magic %d: %w", h.Magic, ErrUnsupportedMagic)
	}
	if h.Size() != len(b) || h.Length < HeaderSize-lengthPrefix {
		return 0, fmt.Errorf("records: length says %d bytes, buffer has %d: %w", h.Size(), len(b), ErrCorrupt)
	}
	if h.NumRecords < 0 {
		return 0, fmt.Errorf("records: negative record count %d: %w", h.NumRecords, ErrCorrupt)
	}
	data := b[HeaderSize:]
	if h.Codec() != CodecNone {
		data, err = Decompress(h.Codec(), data)
		if err != nil {
			return 0, err
		}
	}
	if int64(h.NumRecords)*minRecordSize > int64(len(data)) {
		return 0, fmt.Errorf("records: %d records cannot fit in %d bytes: %w", h.NumRecords, len(data), ErrCorrupt)
	}
	prevDelta := int32(-1)
	for i := int32(0); i < h.NumRecords; i++ {
		d := decoder{b: data}
		n := d.varint()
		if d.err != nil || n < minRecordSize-1 || n > int64(len(d.b)) {
			return 0, fmt.Errorf("records: record %d: length %d with %d bytes left: %w", i, n, len(d.b), ErrCorrupt)
		}
		body := decoder{b: d.b[:n]}
		data = d.b[n:]
		var r Record
		var offDelta int32
		if fn != nil {
			r, offDelta = body.record(h)
		} else {
			offDelta = body.skipRecord() // only checked: nothing built
		}
		if body.err != nil {
			return 0, fmt.Errorf("records: record %d: %v: %w", i, body.err, ErrCorrupt)
		}
		if len(body.b) != 0 {
			return 0, fmt.Errorf("records: record %d: %d trailing bytes: %w", i, len(body.b), ErrCorrupt)
		}
		if offDelta <= prevDelta || offDelta > h.LastOffsetDelta {
			return 0, fmt.Errorf("records: record %d: offset delta %d after %d (last %d): %w", i, offDelta, prevDelta, h.LastOffsetDelta, ErrCorrupt)
		}
		prevDelta = offDelta
		if fn != nil {
			fn(r)
		}
	}
	if len(data) != 0 {
		return 0, fmt.Errorf("records: %d bytes after %d records: %w", len(data), h.NumRecords, ErrCorrupt)
	}
	return int(h.NumRecords), nil
}

type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("short buffer")

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) > 0 && d.b[0] < 0x80 {
		// One byte, the common case for lengths, deltas and counts of
		// small records (zigzag, as binary.Varint).
		u := uint64(d.b[0])
		d.b = d.b[1:]
		return int64(u>>1) ^ -int64(u&1)
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int8() int8 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.err = errShort
		return 0
	}
	v := int8(d.b[0])
	d.b = d.b[1:]
	return v
}

// byteLen reads a byte string's varint length, -1 for null, checked
// against what is left; -2 when d.err is set.
func (d *decoder) byteLen() int64 {
	n := d.varint()
	if d.err != nil {
		return -2
	}
	if n < -1 || n > int64(len(d.b)) {
		d.err = fmt.Errorf("byte string of %d with %d left", n, len(d.b))
		return -2
	}
	return n
}

// bytes reads a varint-length-prefixed byte string; -1 means null.
func (d *decoder) bytes() []byte {
	n := d.byteLen()
	if n < 0 {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	if v == nil {
		v = []byte{}
	}
	return v
}

// skipBytes skips what bytes reads; null reports a null (-1) string.
func (d *decoder) skipBytes() (null bool) {
	n := d.byteLen()
	if n < 0 {
		return n == -1
	}
	d.b = d.b[n:]
	return false
}

// skipRecord checks a record as record does, in the same order and with
// the same errors, without building it (no headers slice, no strings):
// what validating a produced batch needs.
func (d *decoder) skipRecord() int32 {
	d.int8()
	d.varint()
	offDelta := d.varint()
	if offDelta < 0 || offDelta > 1<<31-1 {
		if d.err == nil {
			d.err = fmt.Errorf("offset delta %d", offDelta)
		}
		return 0
	}
	d.skipBytes()
	d.skipBytes()
	nh := d.varint()
	if d.err != nil {
		return 0
	}
	if nh < 0 || nh > int64(len(d.b))/2 {
		d.err = fmt.Errorf("header count %d with %d bytes left", nh, len(d.b))
		return 0
	}
	for range nh {
		if d.skipBytes() && d.err == nil {
			d.err = errors.New("null header key")
		}
		d.skipBytes()
	}
	return int32(offDelta)
}

func (d *decoder) record(h Header) (Record, int32) {
	var r Record
	d.int8() // record attributes: unused
	tsDelta := d.varint()
	offDelta := d.varint()
	if offDelta < 0 || offDelta > 1<<31-1 {
		if d.err == nil {
			d.err = fmt.Errorf("offset delta %d", offDelta)
		}
		return r, 0
	}
	r.Key = d.bytes()
	r.Value = d.bytes()
	nh := d.varint()
	if d.err != nil {
		return r, 0
	}
	// Each header takes at least two bytes: bounds the allocation.
	if nh < 0 || nh > int64(len(d.b))/2 {
		d.err = fmt.Errorf("header count %d with %d bytes left", nh, len(d.b))
		return r, 0
	}
	if nh > 0 {
		r.Headers = make([]kmsg.Header, nh)
	}
	for i := range r.Headers {
		k := d.bytes()
		if d.err == nil && k == nil {
			d.err = errors.New("null header key")
		}
		r.Headers[i] = kmsg.Header{Key: string(k), Value: d.bytes()}
	}
	r.Offset = h.BaseOffset + offDelta
	r.Timestamp = h.FirstTimestamp + tsDelta
	if h.LogAppendTime() {
		r.Timestamp = h.MaxTimestamp
	}
	return r, int32(offDelta)
}

// Batch holds the options for Build.
type Batch struct {
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	Transactional        bool
	Control              bool
	Codec                Codec
	PartitionLeaderEpoch int32
	BaseOffset           int64
}

// Build encodes recs as one v2 batch: offset deltas are the record's index,
// timestamp deltas are relative to recs[0].Timestamp (record Offset fields are
// ignored). The records are compressed with opts.Codec and the CRC computed.
func Build(opts Batch, recs []Record) ([]byte, error) {
	if len(recs) == 0 {
		return nil, fmt.Errorf("records: build: no records: %w", ErrCorrupt)
	}
	if len(recs) > 1<<31-1 {
		return nil, fmt.Errorf("records: build: %d records: %w", len(recs), ErrTooLarge)
	}
	first := recs[0].Timestamp
	maxTS := first
	var body []byte
	var rec []byte
	for i, r := range recs {
		if r.Timestamp > maxTS {
			maxTS = r.Timestamp
		}
		rec = rec[:0]
		rec = append(rec, 0) // attributes
		rec = binary.AppendVarint(rec, r.Timestamp-first)
		rec = binary.AppendVarint(rec, int64(i))
		rec = appendBytes(rec, r.Key)
		rec = appendBytes(rec, r.Value)
		rec = binary.AppendVarint(rec, int64(len(r.Headers)))
		for _, hd := range r.Headers {
			rec = binary.AppendVarint(rec, int64(len(hd.Key)))
			rec = append(rec, hd.Key...)
			rec = appendBytes(rec, hd.Value)
		}
		body = binary.AppendVarint(body, int64(len(rec)))
		body = append(body, rec...)
	}
	if opts.Codec != CodecNone {
		var err error
		body, err = Compress(opts.Codec, body)
		if err != nil {
			return nil, err
		}
	}
	size := HeaderSize + len(body)
	if size > 1<<31-1 {
		return nil, fmt.Errorf("records: build: %d bytes: %w", size, ErrTooLarge)
	}
	b := make([]byte, HeaderSize, size)
	b = append(b, body...)
	be := binary.BigEndian
	attr := uint16(opts.Codec) & attrCodecMask
	if opts.Transactional {
		attr |= attrTransactional
	}
	if opts.Control {
		attr |= attrControl
	}
	be.PutUint64(b[offBaseOffset:], uint64(opts.BaseOffset))
	be.PutUint32(b[offLength:], uint32(size-lengthPrefix))
	be.PutUint32(b[offLeaderEpoch:], uint32(opts.PartitionLeaderEpoch))
	b[offMagic] = 2
	be.PutUint16(b[offAttributes:], attr)
	be.PutUint32(b[offLastOffsetDelta:], uint32(len(recs)-1))
	be.PutUint64(b[offFirstTimestamp:], uint64(first))
	be.PutUint64(b[offMaxTimestamp:], uint64(maxTS))
	be.PutUint64(b[offProducerID:], uint64(opts.ProducerID))
	be.PutUint16(b[offProducerEpoch:], uint16(opts.ProducerEpoch))
	be.PutUint32(b[offBaseSequence:], uint32(opts.BaseSequence))
	be.PutUint32(b[offNumRecords:], uint32(len(recs)))
	be.PutUint32(b[offCRC:], Checksum(b))
	return b, nil
}

// Empty returns a batch with h's header and no records, what the log
// cleaner leaves where nothing of a batch survives but the batch itself
// must stay (it carries producer state, or is a Raft entry): baseOffset,
// lastOffsetDelta, partitionLeaderEpoch, timestamps and producer fields are
// h's, the codec is none (there is nothing to decompress), the other
// attributes (transactional, control, timestamp type, delete horizon) stay.
func Empty(h Header) []byte {
	b := make([]byte, HeaderSize)
	writeHeader(b, h, uint16(h.Attributes)&^attrCodecMask, h.FirstTimestamp, 0)
	return b
}

// Rebuild encodes recs (a subset of the records of the batch whose header
// is h, in offset order, Offset and Timestamp absolute) as that batch
// again: the header fields stay h's except the record count, the CRC and,
// with horizon >= 0, a delete horizon (firstTimestamp = horizon, attribute
// bit 6). Offset deltas are kept, so every record keeps its offset; records
// are compressed with h's codec.
func Rebuild(h Header, recs []Record, horizon int64) ([]byte, error) {
	if len(recs) == 0 {
		return Empty(h), nil
	}
	base := h.FirstTimestamp
	attr := uint16(h.Attributes)
	if horizon >= 0 {
		base, attr = horizon, attr|attrDeleteHorizon
	}
	var body, rec []byte
	for _, r := range recs {
		delta := r.Offset - h.BaseOffset
		if delta < 0 || delta > int64(h.LastOffsetDelta) {
			return nil, fmt.Errorf("records: rebuild: record offset %d outside batch [%d, %d]: %w", r.Offset, h.BaseOffset, h.LastOffset(), ErrCorrupt)
		}
		rec = rec[:0]
		rec = append(rec, 0) // attributes
		rec = binary.AppendVarint(rec, r.Timestamp-base)
		rec = binary.AppendVarint(rec, delta)
		rec = appendBytes(rec, r.Key)
		rec = appendBytes(rec, r.Value)
		rec = binary.AppendVarint(rec, int64(len(r.Headers)))
		for _, hd := range r.Headers {
			rec = binary.AppendVarint(rec, int64(len(hd.Key)))
			rec = append(rec, hd.Key...)
			rec = appendBytes(rec, hd.Value)
		}
		body = binary.AppendVarint(body, int64(len(rec)))
		body = append(body, rec...)
	}
	if c := h.Codec(); c != CodecNone {
		var err error
		if body, err = Compress(c, body); err != nil {
			return nil, err
		}
	}
	b := make([]byte, HeaderSize, HeaderSize+len(body))
	b = append(b, body...)
	writeHeader(b, h, attr, base, int32(len(recs)))
	return b, nil
}

// writeHeader fills b's header from h with the given attributes, first
// timestamp and record count, the length from len(b), and the CRC.
func writeHeader(b []byte, h Header, attr uint16, firstTS int64, n int32) {
	be := binary.BigEndian
	be.PutUint64(b[offBaseOffset:], uint64(h.BaseOffset))
	be.PutUint32(b[offLength:], uint32(len(b)-lengthPrefix))
	be.PutUint32(b[offLeaderEpoch:], uint32(h.PartitionLeaderEpoch))
	b[offMagic] = 2
	be.PutUint16(b[offAttributes:], attr)
	be.PutUint32(b[offLastOffsetDelta:], uint32(h.LastOffsetDelta))
	be.PutUint64(b[offFirstTimestamp:], uint64(firstTS))
	be.PutUint64(b[offMaxTimestamp:], uint64(h.MaxTimestamp))
	be.PutUint64(b[offProducerID:], uint64(h.ProducerID))
	be.PutUint16(b[offProducerEpoch:], uint16(h.ProducerEpoch))
	be.PutUint32(b[offBaseSequence:], uint32(h.BaseSequence))
	be.PutUint32(b[offNumRecords:], uint32(n))
	be.PutUint32(b[offCRC:], Checksum(b))
}

func appendBytes(dst, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(v)))
	return append(dst, v...)
}
