package bufref

import "testing"

func TestReleaseByLastHolder(t *testing.T) {
	buf := make([]byte, 10, 16)
	var got [][]byte
	r := New(buf, func(b []byte) { got = append(got, b) })
	r.Retain()
	r.Retain()
	r.Release()
	r.Release()
	if len(got) != 0 {
		t.Fatal("put back while a holder remains")
	}
	r.Release()
	if len(got) != 1 || &got[0][0] != &buf[0] {
		t.Fatalf("put back %d times, want once", len(got))
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a release below zero did not panic")
			}
		}()
		r.Release()
	}()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a retain of a released buffer did not panic")
			}
		}()
		r.Retain()
	}()
}

func TestHolds(t *testing.T) {
	buf := make([]byte, 10, 16)
	r := New(buf, nil)
	other := make([]byte, 4)
	for _, c := range []struct {
		b    []byte
		want bool
	}{
		{buf, true}, {buf[3:7], true}, {buf[9:], true}, {buf[12:16], true}, // within cap
		{buf[10:10], false}, {other, false}, {nil, false},
	} {
		if got := r.Holds(c.b); got != c.want {
			t.Errorf("Holds(len %d) = %v, want %v", len(c.b), got, c.want)
		}
	}
}
