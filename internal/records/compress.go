package records

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Codec is the compression codec of a batch (attributes & 7).
type Codec int8

// Codecs as numbered by Kafka.
const (
	CodecNone   Codec = 0
	CodecGzip   Codec = 1
	CodecSnappy Codec = 2
	CodecLZ4    Codec = 3
	CodecZstd   Codec = 4
)

// MaxDecompressed bounds the output of Decompress: a batch whose records
// inflate beyond it is refused, so a small "zip bomb" cannot exhaust memory.
const MaxDecompressed = 64 << 20

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLZ4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", int8(c))
}

var (
	zstdEncOnce sync.Once
	zstdEnc     *zstd.Encoder
	zstdEncErr  error

	zstdDecOnce sync.Once
	zstdDec     *zstd.Decoder
	zstdDecErr  error
)

func zstdEncoder() (*zstd.Encoder, error) {
	zstdEncOnce.Do(func() {
		// EncodeAll on a shared encoder is safe for concurrent use.
		zstdEnc, zstdEncErr = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	})
	return zstdEnc, zstdEncErr
}

func zstdDecoder() (*zstd.Decoder, error) {
	zstdDecOnce.Do(func() {
		// DecodeAll on a shared decoder is safe for concurrent use; its internal
		// pool holds one decoder per concurrent caller. MaxMemory caps what a
		// frame may make it allocate, whatever the frame header claims.
		zstdDec, zstdDecErr = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(MaxDecompressed),
			zstd.WithDecoderMaxWindow(MaxDecompressed))
	})
	return zstdDec, zstdDecErr
}

// Compress compresses data with codec c (the records section of a batch).
func Compress(c Codec, data []byte) ([]byte, error) {
	switch c {
	case CodecNone:
		return append([]byte(nil), data...), nil
	case CodecGzip:
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		if _, err := w.Write(data); err != nil {
			return nil, fmt.Errorf("records: gzip: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("records: gzip: %w", err)
		}
		return buf.Bytes(), nil
	case CodecSnappy:
		// A raw snappy block, what librdkafka and franz-go write.
		return s2.EncodeSnappy(nil, data), nil
	case CodecLZ4:
		var buf bytes.Buffer
		w := lz4.NewWriter(&buf)
		if _, err := w.Write(data); err != nil {
			return nil, fmt.Errorf("records: lz4: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("records: lz4: %w", err)
		}
		return buf.Bytes(), nil
	case CodecZstd:
		enc, err := zstdEncoder()
		if err != nil {
			return nil, fmt.Errorf("records: zstd: %w", err)
		}
		return enc.EncodeAll(data, nil), nil
	}
	return nil, fmt.Errorf("records: compress with %v: %w", c, ErrCorrupt)
}

// Decompress decompresses data with codec c, refusing output larger than
// MaxDecompressed with ErrTooLarge.
func Decompress(c Codec, data []byte) ([]byte, error) {
	return DecompressLimit(c, data, MaxDecompressed)
}

// DecompressLimit is Decompress with an explicit output bound (at most
// MaxDecompressed).
func DecompressLimit(c Codec, data []byte, limit int) ([]byte, error) {
	if limit <= 0 || limit > MaxDecompressed {
		limit = MaxDecompressed
	}
	switch c {
	case CodecNone:
		if len(data) > limit {
			return nil, fmt.Errorf("records: %d bytes exceed limit %d: %w", len(data), limit, ErrTooLarge)
		}
		return data, nil
	case CodecGzip:
		r, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("records: gzip: %v: %w", err, ErrCorrupt)
		}
		return readBounded("gzip", r, limit)
	case CodecSnappy:
		return snappyDecode(data, limit)
	case CodecLZ4:
		return readBounded("lz4", lz4.NewReader(bytes.NewReader(data)), limit)
	case CodecZstd:
		dec, err := zstdDecoder()
		if err != nil {
			return nil, fmt.Errorf("records: zstd: %w", err)
		}
		out, err := dec.DecodeAll(data, nil)
		if err != nil {
			if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
				return nil, fmt.Errorf("records: zstd: %v: %w", err, ErrTooLarge)
			}
			return nil, fmt.Errorf("records: zstd: %v: %w", err, ErrCorrupt)
		}
		if len(out) > limit {
			return nil, fmt.Errorf("records: zstd output exceeds %d bytes: %w", limit, ErrTooLarge)
		}
		return out, nil
	}
	return nil, fmt.Errorf("records: unknown codec %v: %w", c, ErrCorrupt)
}

func readBounded(name string, r io.Reader, limit int) ([]byte, error) {
	out, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("records: %s: %v: %w", name, err, ErrCorrupt)
	}
	if len(out) > limit {
		return nil, fmt.Errorf("records: %s output exceeds %d bytes: %w", name, limit, ErrTooLarge)
	}
	return out, nil
}

// xerialMagic starts the framed snappy the Java client writes
// (org.xerial.snappy.SnappyOutputStream): magic, version, compatible version,
// then chunks of [int32 length][raw snappy block].
var xerialMagic = []byte("\x82SNAPPY\x00")

const xerialHeaderLen = 16

func snappyDecode(data []byte, limit int) ([]byte, error) {
	if !bytes.HasPrefix(data, xerialMagic) {
		return snappyBlock(nil, data, limit)
	}
	if len(data) < xerialHeaderLen {
		return nil, fmt.Errorf("records: xerial snappy header truncated: %w", ErrCorrupt)
	}
	var out []byte
	rest := data[xerialHeaderLen:]
	for len(rest) > 0 {
		if len(rest) < 4 {
			return nil, fmt.Errorf("records: xerial snappy chunk length truncated: %w", ErrCorrupt)
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return nil, fmt.Errorf("records: xerial snappy chunk of %d bytes runs past %d: %w", n, len(rest), ErrCorrupt)
		}
		var err error
		out, err = snappyBlock(out, rest[:n], limit)
		if err != nil {
			return nil, err
		}
		rest = rest[n:]
	}
	return out, nil
}

// snappyBlock appends the decoding of one raw snappy block to dst, checking the
// declared length before allocating.
func snappyBlock(dst, block []byte, limit int) ([]byte, error) {
	n, err := s2.DecodedLen(block)
	if err != nil {
		return nil, fmt.Errorf("records: snappy: %v: %w", err, ErrCorrupt)
	}
	if n > limit-len(dst) {
		return nil, fmt.Errorf("records: snappy output exceeds %d bytes: %w", limit, ErrTooLarge)
	}
	out, err := s2.Decode(nil, block)
	if err != nil {
		return nil, fmt.Errorf("records: snappy: %v: %w", err, ErrCorrupt)
	}
	if dst == nil {
		return out, nil
	}
	return append(dst, out...), nil
}
