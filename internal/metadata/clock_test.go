package metadata

import (
	"path/filepath"
	"testing"
	"time"

	"holdfast/internal/clock"
	"holdfast/internal/storage"
	"holdfast/internal/testwait"
)

// TestSnapshotIntervalOnTheClock: the MaxInterval snapshot is taken when
// an hour has passed on the store's clock (SetClock), a fake one here,
// and not before. With the timer on time.AfterFunc (before SetClock) the
// test timed out.
func TestSnapshotIntervalOnTheClock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	fs := storage.OSFS()
	s := open(t, fs, dir)
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	s.SetClock(clk)
	s.SetSnapshotPolicy(SnapshotPolicy{MaxBytes: 1 << 30, MaxInterval: time.Hour})
	onDisk := func() int64 {
		t.Helper()
		data, err := readFile(fs, join(dir, fileName))
		if err != nil {
			t.Fatal(err)
		}
		st, err := decode(data)
		if err != nil {
			t.Fatal(err)
		}
		return st.Applied
	}
	var log metaLog
	log.apply(t, s, Command{Op: OpFence, IDs: []int32{7}})
	clk.Advance(time.Hour - time.Second)
	waitSnapshots(s)
	if got := onDisk(); got != 0 {
		t.Fatalf("snapshot at %d before MaxInterval", got)
	}
	clk.Advance(time.Second)
	testwait.Until(t, 10*time.Second, "a snapshot after MaxInterval of the clock", func() bool { return onDisk() == 1 })
	closeStore(t, s)
}
