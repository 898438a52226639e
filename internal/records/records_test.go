package records

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func sampleRecords(n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{
			Timestamp: 1_700_000_000_000 + int64(i*3),
			Key:       []byte{byte(i)},
			Value:     bytes.Repeat([]byte("v"), i*7),
		}
		if i%2 == 0 {
			recs[i].Headers = []kmsg.Header{{Key: "h", Value: []byte("x")}}
		}
	}
	recs[0].Key = nil // null key
	return recs
}

func TestBuildRoundTripAllCodecs(t *testing.T) {
	for _, c := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		t.Run(c.String(), func(t *testing.T) {
			in := sampleRecords(20)
			b, err := Build(Batch{ProducerID: 7, ProducerEpoch: 2, BaseSequence: 40, Transactional: true, Codec: c, PartitionLeaderEpoch: 3, BaseOffset: 100}, in)
			if err != nil {
				t.Fatal(err)
			}
			h, err := Validate(b, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if h.Codec() != c || !h.IsTransactional() || h.IsControl() || h.LogAppendTime() {
				t.Fatalf("attributes %x", h.Attributes)
			}
			if h.BaseOffset != 100 || h.LastOffset() != 119 || h.NumRecords != 20 || h.PartitionLeaderEpoch != 3 || h.ProducerID != 7 || h.ProducerEpoch != 2 || h.BaseSequence != 40 {
				t.Fatalf("header %+v", h)
			}
			if h.Size() != len(b) || h.MaxTimestamp != in[19].Timestamp || h.FirstTimestamp != in[0].Timestamp {
				t.Fatalf("header %+v", h)
			}
			if err := ValidateRecords(b); err != nil {
				t.Fatal(err)
			}
			out, err := Records(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != len(in) {
				t.Fatalf("%d records", len(out))
			}
			for i := range out {
				if out[i].Offset != 100+int64(i) || out[i].Timestamp != in[i].Timestamp || !bytes.Equal(out[i].Key, in[i].Key) || !bytes.Equal(out[i].Value, in[i].Value) || len(out[i].Headers) != len(in[i].Headers) {
					t.Fatalf("record %d: %+v want %+v", i, out[i], in[i])
				}
				if (out[i].Key == nil) != (in[i].Key == nil) {
					t.Fatalf("record %d: key nil-ness", i)
				}
			}
		})
	}
}

// A batch encoded by franz-go's kmsg (what real clients send) must validate.
func TestKmsgInterop(t *testing.T) {
	var body []byte
	for i := 0; i < 3; i++ {
		r := kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: int64(i), Key: []byte("k"), Value: []byte("value")}
		enc := r.AppendTo(nil)
		r.Length = int32(len(enc) - 1) // length varint of 0 is one byte
		body = r.AppendTo(body)
	}
	rb := kmsg.RecordBatch{FirstOffset: 0, Magic: 2, LastOffsetDelta: 2, FirstTimestamp: 5, MaxTimestamp: 7, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 3, Records: body}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	if _, err := Validate(b, 0); err != nil {
		t.Fatal(err)
	}
	recs, err := Records(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[2].Timestamp != 7 || string(recs[1].Value) != "value" {
		t.Fatalf("%+v", recs)
	}
}

func TestValidateRejects(t *testing.T) {
	good, err := Build(Batch{}, sampleRecords(3))
	if err != nil {
		t.Fatal(err)
	}
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	recrc := func(b []byte) []byte { binary.BigEndian.PutUint32(b[17:], Checksum(b)); return b }
	cases := []struct {
		name string
		b    []byte
		max  int
		want error
	}{
		{"short", good[:60], 0, ErrTruncated},
		{"crc", mut(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), 0, ErrCorrupt},
		{"magic", mut(func(b []byte) []byte { b[16] = 1; return b }), 0, ErrUnsupportedMagic},
		{"length past buffer", mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], uint32(len(b))); return b }), 0, ErrTruncated},
		{"length short of buffer", append(append([]byte(nil), good...), 0), 0, ErrCorrupt},
		{"tiny length", mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 10); return b }), 0, ErrCorrupt},
		{"too large", good, len(good) - 1, ErrTooLarge},
		{"negative count", mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[57:], 0xffffffff); return recrc(b) }), 0, ErrCorrupt},
		{"fewer offsets than records", mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[23:], 0); return recrc(b) }), 0, ErrCorrupt},
		{"bad codec", mut(func(b []byte) []byte { b[22] |= 7; return recrc(b) }), 0, ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Validate(c.b, c.max); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	if _, err := Validate(good, len(good)); err != nil {
		t.Fatal(err)
	}
}

func TestValidateRecordsRejects(t *testing.T) {
	good, _ := Build(Batch{}, sampleRecords(3))
	recrc := func(b []byte) []byte { binary.BigEndian.PutUint32(b[17:], Checksum(b)); return b }
	// Claim one record more than present (and a matching lastOffsetDelta).
	b := append([]byte(nil), good...)
	binary.BigEndian.PutUint32(b[57:], 4)
	binary.BigEndian.PutUint32(b[23:], 3)
	if _, err := Validate(recrc(b), 0); err != nil {
		t.Fatal(err)
	}
	if err := ValidateRecords(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("count mismatch: %v", err)
	}
	// Garbage in a record body.
	b = append([]byte(nil), good...)
	b[HeaderSize] = 0x7f
	if err := ValidateRecords(recrc(b)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("garbage: %v", err)
	}
	// Garbage compressed payload.
	for _, c := range []Codec{CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		b = append([]byte(nil), good...)
		b[22] = byte(c)
		if err := ValidateRecords(recrc(b)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%v garbage: %v", c, err)
		}
	}
}

func TestNext(t *testing.T) {
	a, _ := Build(Batch{}, sampleRecords(2))
	b, _ := Build(Batch{BaseOffset: 2}, sampleRecords(5))
	buf := append(append([]byte(nil), a...), b...)
	first, rest, err := Next(buf)
	if err != nil || !bytes.Equal(first, a) || !bytes.Equal(rest, b) {
		t.Fatalf("first split: %v", err)
	}
	second, rest, err := Next(rest)
	if err != nil || !bytes.Equal(second, b) || len(rest) != 0 {
		t.Fatalf("second split: %v", err)
	}
	if _, _, err := Next(buf[:len(a)+30]); err != nil && !errors.Is(err, ErrTruncated) {
		t.Fatal(err)
	}
	if _, _, err := Next(buf[len(a) : len(a)+30]); !errors.Is(err, ErrTruncated) {
		t.Fatalf("partial: %v", err)
	}
	if _, _, err := Next(buf[:5]); !errors.Is(err, ErrTruncated) {
		t.Fatalf("tiny: %v", err)
	}
}

func TestSetters(t *testing.T) {
	b, _ := Build(Batch{}, sampleRecords(4))
	SetBaseOffset(b, 1234)
	SetLeaderEpoch(b, 9)
	h, err := Validate(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if h.BaseOffset != 1234 || h.PartitionLeaderEpoch != 9 {
		t.Fatalf("%+v", h)
	}
	SetLogAppendTime(b, 42)
	h, err = Validate(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !h.LogAppendTime() || h.MaxTimestamp != 42 {
		t.Fatalf("%+v", h)
	}
	recs, err := Records(b)
	if err != nil || recs[3].Timestamp != 42 || recs[0].Offset != 1234 {
		t.Fatalf("%v %+v", err, recs)
	}
}

func TestXerialSnappy(t *testing.T) {
	data := bytes.Repeat([]byte("hello xerial "), 1000)
	framed := append([]byte(nil), xerialMagic...)
	framed = binary.BigEndian.AppendUint32(framed, 1)
	framed = binary.BigEndian.AppendUint32(framed, 1)
	for _, chunk := range [][]byte{data[:5000], data[5000:]} {
		blk := s2.EncodeSnappy(nil, chunk)
		framed = binary.BigEndian.AppendUint32(framed, uint32(len(blk)))
		framed = append(framed, blk...)
	}
	out, err := Decompress(CodecSnappy, framed)
	if err != nil || !bytes.Equal(out, data) {
		t.Fatalf("xerial: %v", err)
	}
	if _, err := Decompress(CodecSnappy, framed[:len(framed)-3]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated xerial: %v", err)
	}
}

func TestDecompressBounded(t *testing.T) {
	data := make([]byte, 4<<20) // compresses to almost nothing
	for _, c := range []Codec{CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		z, err := Compress(c, data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecompressLimit(c, z, 1<<20); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("%v: %v", c, err)
		}
		out, err := DecompressLimit(c, z, 8<<20)
		if err != nil || len(out) != len(data) {
			t.Fatalf("%v: %v %d", c, err, len(out))
		}
	}
}

func FuzzValidate(f *testing.F) {
	for _, c := range []Codec{CodecNone, CodecGzip, CodecZstd} {
		b, _ := Build(Batch{Codec: c}, sampleRecords(3))
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Validate(b, 1<<20)
		if err != nil {
			return
		}
		if crc32.Checksum(b[21:], castagnoli) != h.CRC || b[16] != 2 || h.Size() != len(b) {
			t.Fatalf("accepted a bad batch: %+v", h)
		}
		if _, rest, err := Next(b); err != nil || len(rest) != 0 {
			t.Fatalf("Next disagrees with Validate: %v", err)
		}
	})
}

func FuzzRecords(f *testing.F) {
	for _, c := range []Codec{CodecNone, CodecSnappy, CodecLZ4} {
		b, _ := Build(Batch{Codec: c}, sampleRecords(4))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := Records(b)
		if err != nil {
			return
		}
		h, _ := ParseHeader(b)
		if len(recs) != int(h.NumRecords) {
			t.Fatalf("%d records, header says %d", len(recs), h.NumRecords)
		}
		// Re-encoding what was decoded must decode to the same records.
		if len(recs) > 0 {
			nb, err := Build(Batch{BaseOffset: h.BaseOffset}, recs)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Validate(nb, 0); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// What the log cleaner makes: batches with gaps (more offsets than
// records) and empty batches are valid stored batches, not producer ones.
func TestRebuildAndEmpty(t *testing.T) {
	recs := []Record{{Timestamp: 100, Key: []byte("a"), Value: []byte("1")}, {Timestamp: 105, Key: []byte("b"), Value: nil}, {Timestamp: 110, Key: []byte("c"), Value: []byte("3"), Headers: []kmsg.Header{{Key: "h", Value: []byte("v")}}}}
	for _, codec := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		b, err := Build(Batch{ProducerID: 9, ProducerEpoch: 2, BaseSequence: 40, Transactional: true, Codec: codec, PartitionLeaderEpoch: 7, BaseOffset: 1000}, recs)
		if err != nil {
			t.Fatal(err)
		}
		h, err := Validate(b, 0)
		if err != nil || !Dense(h) {
			t.Fatalf("%v: built batch: %v dense %v", codec, err, Dense(h))
		}
		all, _ := Records(b)
		kept := []Record{all[1], all[2]} // offsets 1001 and 1002: a gap at 1000
		for _, horizon := range []int64{-1, 5000} {
			nb, err := Rebuild(h, kept, horizon)
			if err != nil {
				t.Fatal(err)
			}
			nh, err := Validate(nb, 0)
			if err != nil {
				t.Fatalf("%v: rebuilt: %v", codec, err)
			}
			if Dense(nh) || nh.NumRecords != 2 || nh.BaseOffset != 1000 || nh.LastOffsetDelta != 2 || nh.PartitionLeaderEpoch != 7 ||
				nh.ProducerID != 9 || nh.ProducerEpoch != 2 || nh.BaseSequence != 40 || nh.MaxTimestamp != h.MaxTimestamp || nh.Codec() != codec || !nh.IsTransactional() {
				t.Fatalf("%v: rebuilt header %+v from %+v", codec, nh, h)
			}
			if hz, ok := nh.DeleteHorizon(); ok != (horizon >= 0) || ok && hz != horizon {
				t.Fatalf("horizon %d, %v; want %d", hz, ok, horizon)
			}
			got, err := Records(nb)
			if err != nil || len(got) != 2 {
				t.Fatalf("%v: %v %d", codec, err, len(got))
			}
			for i, r := range got {
				w := kept[i]
				if r.Offset != w.Offset || r.Timestamp != w.Timestamp || string(r.Key) != string(w.Key) || (r.Value == nil) != (w.Value == nil) || string(r.Value) != string(w.Value) || len(r.Headers) != len(w.Headers) {
					t.Fatalf("%v: record %d: %+v, want %+v", codec, i, r, w)
				}
			}
		}
		e := Empty(h)
		eh, err := Validate(e, 0)
		if err != nil || eh.NumRecords != 0 || eh.BaseOffset != 1000 || eh.LastOffset() != 1002 || eh.Codec() != CodecNone || !eh.IsTransactional() || eh.BaseSequence != 40 || len(e) != HeaderSize {
			t.Fatalf("%v: empty batch %+v: %v", codec, eh, err)
		}
		if got, err := Records(e); err != nil || len(got) != 0 {
			t.Fatalf("empty batch decodes to %d records: %v", len(got), err)
		}
		// Clients parse it with kmsg too.
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(e); err != nil || rb.NumRecords != 0 || rb.LastOffsetDelta != 2 {
			t.Fatalf("kmsg: %+v %v", rb, err)
		}
	}
}

// A checked batch's setters rewrite the bytes and the header alike: what
// the layers below take from Header is what a fresh Validate would say.
func TestValidatedSetters(t *testing.T) {
	b, _ := Build(Batch{}, sampleRecords(4))
	v, err := Check(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	v.SetBaseOffset(77)
	v.SetLeaderEpoch(3)
	v.SetLogAppendTime(99)
	h, err := Validate(v.Bytes(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if h != v.Header() {
		t.Fatalf("header kept %+v, batch says %+v", v.Header(), h)
	}
	c := bytes.Clone(b)
	if w, ok := v.Rebind(c); !ok || w.Header() != v.Header() || &w.Bytes()[0] != &c[0] {
		t.Fatal("Rebind refused a whole copy")
	}
	if _, ok := v.Rebind(c[:len(c)-1]); ok {
		t.Fatal("Rebind took a shorter copy")
	}
	c[20] ^= 1 // the CRC
	if _, ok := v.Rebind(c); ok {
		t.Fatal("Rebind took a copy with another header")
	}
	if _, ok := (Validated{}).Rebind(nil); ok {
		t.Fatal("the zero Validated rebinds")
	}
	if _, err := Check(b, len(b)-1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	b[len(b)-1] ^= 1
	if _, err := Check(b, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad CRC: %v", err)
	}
}

// TestValidateRecordsAgreesWithDecode: the checking-only walk of
// ValidateRecords accepts and refuses exactly what decoding every record
// (Records) does, with the same error, over batches of records with and
// without keys, values and headers, one byte of their records changed at
// a time (varints of one and of several bytes among them).
func TestValidateRecordsAgreesWithDecode(t *testing.T) {
	recs := sampleRecords(5)
	recs[3].Value = bytes.Repeat([]byte("w"), 300) // a two-byte length
	recs[4].Headers = []kmsg.Header{{Key: "", Value: nil}, {Key: "k", Value: bytes.Repeat([]byte("h"), 200)}}
	good, err := Build(Batch{}, recs)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := HeaderSize; i < len(good); i++ {
		for _, v := range []byte{0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff, good[i] + 1, good[i] - 1} {
			b := append([]byte(nil), good...)
			b[i] = v
			_, errDecode := Records(b)
			errCheck := ValidateRecords(b)
			if (errDecode == nil) != (errCheck == nil) || errDecode != nil && errDecode.Error() != errCheck.Error() {
				t.Fatalf("byte %d = %#x: decoding says %v, checking says %v", i, v, errDecode, errCheck)
			}
			if errCheck != nil {
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no change was refused")
	}
	if err := ValidateRecords(good); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkValidateRecords: decoding every record of a produced batch to
// check it (what Append does after the CRC), for records of 100 B and 1 KiB
// without headers, as kload produces them.
//
//	go test ./internal/records -run '^$' -bench ValidateRecords -count 6
func BenchmarkValidateRecords(b *testing.B) {
	for _, size := range []int{100, 1024} {
		b.Run(fmt.Sprintf("record=%dB", size), func(b *testing.B) {
			recs := make([]Record, (1<<20)/size)
			for i := range recs {
				recs[i] = Record{Timestamp: 1_700_000_000_000, Value: bytes.Repeat([]byte("v"), size)}
			}
			bt, err := Build(Batch{}, recs)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(bt)))
			b.ReportAllocs()
			for b.Loop() {
				if err := ValidateRecords(bt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
