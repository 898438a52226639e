package storage

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"holdfast/internal/records"
)

// FlipSealedBatch damages the middle batch of the first segment so that
// only its CRC tells, and a second call leaves it damaged (an XOR twice
// would mend it: the lab flips again when a first flip did not bite).
func TestFlipSealedBatch(t *testing.T) {
	dir := t.TempDir()
	var seg []byte
	for i := 0; i < 3; i++ {
		seg = append(seg, batch(t, 2, 100, int64(i))...)
	}
	first := filepath.Join(dir, segmentName(0, logSuffix))
	if err := os.WriteFile(first, seg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, segmentName(6, logSuffix)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	path, at, err := FlipSealedBatch(dir)
	if err != nil || path != first {
		t.Fatalf("FlipSealedBatch = %s, %v; want %s", path, err, first)
	}
	once, _ := os.ReadFile(first)
	var bad int
	for rest := once; len(rest) > 0; {
		b, next, err := records.Next(rest)
		if err != nil {
			t.Fatalf("framing broken by the flip at %d: %v", at, err)
		}
		if _, err := records.Validate(b, 0); err != nil {
			bad++
		}
		rest = next
	}
	if bad != 1 {
		t.Fatalf("%d batches fail their CRC after one flip, want 1", bad)
	}
	if _, _, err := FlipSealedBatch(dir); err != nil {
		t.Fatal(err)
	}
	if twice, _ := os.ReadFile(first); !bytes.Equal(twice, once) {
		t.Fatal("a second flip changed the damaged batch (and may have mended it)")
	}
}
