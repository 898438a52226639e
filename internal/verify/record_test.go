package verify

import (
	"bytes"
	"testing"
)

func TestValueRoundTrip(t *testing.T) {
	for _, size := range []int{0, 10, MinSize, 100, 4000} {
		for _, key := range [][]byte{nil, []byte("k7")} {
			id := ID{3, 123456789}
			v := Value("abcdef012345", id, key, size)
			if len(v) < size {
				t.Fatalf("size %d: value of %d bytes", size, len(v))
			}
			got, st := Parse("abcdef012345", key, v)
			if st != Valid || got != id {
				t.Fatalf("size %d key %q: parsed %v status %v from %q", size, key, got, st, v)
			}
		}
	}
	if MinSize < len(Value("abcdef012345", ID{1<<31 - 1, 1<<63 - 1}, nil, 0)) {
		t.Fatalf("MinSize %d is smaller than the longest header", MinSize)
	}
}

// TestParseCatchesDamage: any changed byte of the value after the magic,
// or a changed key, is corrupt; another run's or another writer's record
// is foreign. (A damaged magic makes a record foreign: it no longer says
// it is ours.)
func TestParseCatchesDamage(t *testing.T) {
	key := []byte("k1")
	v := Value("run1", ID{0, 42}, key, 80)
	for i := len(magic); i < len(v); i++ {
		d := bytes.Clone(v)
		d[i] ^= 0x01
		if _, st := Parse("run1", key, d); st != Corrupt {
			t.Fatalf("byte %d flipped (%q): status %v, want corrupt", i, d, st)
		}
	}
	if _, st := Parse("run1", []byte("k2"), v); st != Corrupt {
		t.Fatalf("changed key: status %v, want corrupt", st)
	}
	if _, st := Parse("run1", key, v[:40]); st != Corrupt {
		t.Fatalf("truncated value: status %v, want corrupt", st)
	}
	if _, st := Parse("run2", key, v); st != Foreign {
		t.Fatalf("another run's record: status %v, want foreign", st)
	}
	if _, st := Parse("run1", nil, []byte("hello")); st != Foreign {
		t.Fatalf("someone else's record: status %v, want foreign", st)
	}
}
