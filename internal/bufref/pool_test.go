package bufref

import "testing"

func TestPoolClasses(t *testing.T) {
	p := NewPool(12, 23, 64, 64<<20)
	for _, c := range []struct {
		n    int
		want int
		ok   bool
	}{{1, 12, true}, {4096, 12, true}, {4097, 13, true}, {1 << 20, 20, true}, {8 << 20, 23, true}, {8<<20 + 1, 24, false}} {
		got, ok := p.Class(c.n)
		if got != c.want || ok != c.ok {
			t.Errorf("Class(%d) = %d, %v; want %d, %v", c.n, got, ok, c.want, c.ok)
		}
		if b := p.Get(c.n); cap(b) < c.n || len(b) != 0 {
			t.Errorf("Get(%d): len %d cap %d", c.n, len(b), cap(b))
		}
	}
	// A buffer of a foreign capacity is not pooled (it would be handed
	// out for a class it does not fill).
	p.Put(make([]byte, 5000))
	if p.pooled.Load() != 0 || p.Recycled() != 0 {
		t.Fatalf("a 5000-byte buffer was pooled")
	}
	if _, ok := p.TryGet(5000); ok {
		t.Fatal("TryGet found a buffer in an empty class")
	}
	// A buffer put back is the one handed out next for its class.
	b := p.Get(4096)[:1]
	p.Put(b)
	if got, ok := p.TryGet(100); !ok || &got[:1][0] != &b[0] || len(got) != 0 {
		t.Fatalf("TryGet after a Put: %v, want the buffer put back, empty", ok)
	}
	// The pool holds at most its bytes, and each class its count.
	for range 2*(64<<20)/(8<<20) + 64 {
		p.Put(make([]byte, 8<<20))
	}
	if n := p.pooled.Load(); n > 64<<20 {
		t.Fatalf("pool holds %d bytes, limit %d", n, 64<<20)
	}
	small := NewPool(12, 13, 2, 1<<20)
	for range 5 {
		small.Put(make([]byte, 4096))
	}
	if r := small.Recycled(); r != 2 {
		t.Fatalf("a class of 2 took %d buffers", r)
	}
}

// TestPoolPoison: with poisoning on (as in every test that starts a
// broker), a buffer put back is overwritten at once, so a holder that
// reads it after its release cannot read valid bytes.
func TestPoolPoison(t *testing.T) {
	p := NewPool(12, 23, 64, 64<<20)
	p.SetPoison(true)
	b := p.Get(4096)[:100]
	copy(b, "a record batch")
	p.Put(b)
	for i, c := range b[:cap(b)] {
		if c != 0xdb {
			t.Fatalf("byte %d of a put-back buffer is %#x, want the poison 0xdb", i, c)
		}
	}
}
