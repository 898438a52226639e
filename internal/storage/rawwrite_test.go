package storage

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// osFile.Write, raw write(2) or os.File.Write, appends every byte in order,
// large writes and small, and reports a closed file as an error with
// nothing written.
func TestOSFileRawWrite(t *testing.T) {
	for _, raw := range []bool{true, false} {
		t.Run(map[bool]string{true: "raw", false: "os"}[raw], func(t *testing.T) {
			testOSFileWrite(t, raw)
		})
	}
}

func testOSFileWrite(t *testing.T, raw bool) {
	name := filepath.Join(t.TempDir(), "f")
	f, err := OSFS().OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if raw && !f.(*osFile).raw {
		t.Logf("this filesystem does not get raw writes (rawWriteAllowed); testing them anyway")
	}
	f.(*osFile).raw = raw
	var want []byte
	for i, size := range []int{1, 4095, 3 << 20, 0, 17, 1 << 20} {
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(i*31 + j*7)
		}
		n, err := f.Write(p)
		if err != nil || n != size {
			t.Fatalf("write of %d bytes: %d, %v", size, n, err)
		}
		want = append(want, p...)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("file holds %d bytes, not the %d written in order", len(got), len(want))
	}
	if n, err := f.Write([]byte("late")); err == nil || n != 0 {
		t.Fatalf("write to a closed file: %d, %v; want 0 and an error", n, err)
	}
}
