package tiered

import "testing"

// TestLookupTime: the first batch whose largest timestamp reaches the
// target, never later than the exact one in a thinned index or below a
// log start cut through the segment.
func TestLookupTime(t *testing.T) {
	// Batches of 10 offsets; timestamps 100, 200, ... (each raises).
	var ix [][3]int64
	for i := int64(0); i < 50; i++ {
		ix = append(ix, [3]int64{100 * (i + 1), 10 * i, 10*i + 9})
	}
	for _, c := range []struct{ ts, from, off, mts int64 }{
		{1, 0, 0, 100},
		{100, 0, 0, 100},
		{101, 0, 10, 200},
		{5000, 0, 490, 5000},
		{250, 25, 25, 300}, // the batch found ends above the cut
		{150, 35, 35, 200}, // the batch found ends below the cut: the cut
	} {
		off, mts, ok := lookupTime(ix, false, c.ts, c.from)
		if !ok || off != c.off || mts != c.mts {
			t.Fatalf("lookup %d from %d: %d %d %v, want %d %d", c.ts, c.from, off, mts, ok, c.off, c.mts)
		}
	}
	if _, _, ok := lookupTime(ix, false, 5001, 0); ok {
		t.Fatal("a timestamp above the segment's found a batch")
	}

	big := make([][3]int64, 3*maxTimeIndex+7)
	for i := range big {
		big[i] = [3]int64{int64(i + 1), int64(2 * i), int64(2*i + 1)}
	}
	thin, sparse := thinTimeIndex(big)
	if !sparse || len(thin) > maxTimeIndex+1 || thin[len(thin)-1] != big[len(big)-1] {
		t.Fatalf("thinned to %d entries (sparse %v)", len(thin), sparse)
	}
	for ts := int64(1); ts <= int64(len(big)); ts += 997 {
		exact := 2 * (ts - 1)
		off, _, ok := lookupTime(thin, true, ts, 0)
		if !ok || off > exact {
			t.Fatalf("thinned lookup %d: %d %v, exact %d", ts, off, ok, exact)
		}
	}
}
