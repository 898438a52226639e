package storage

import (
	"fmt"
	"slices"
	"testing"
)

// TestNewDirSettleCrashAtEveryStep: logs opened in directories just made
// and not durable yet (Options.NewDir with Settle, as the partition
// manager creates them) make them durable with their first durable write:
// a power cut, torn or not, directory changes persisting in order, at
// every step of making four such logs and syncing two rounds of appends -
// one syncfs for the four or an fsync each, appends opening a leader
// epoch or not - leaves every offset a cycle declared durable on disk,
// under the directory it was written to.
func TestNewDirSettleCrashAtEveryStep(t *testing.T) {
	for _, syncfs := range []bool{false, true} {
		for _, epoch := range []int32{-1, 1} {
			t.Run(fmt.Sprintf("syncfs=%v/epoch=%d", syncfs, epoch), func(t *testing.T) {
				steps := newDirCrashSteps(t, syncfs, epoch)
				t.Logf("%d steps", steps)
			})
		}
	}
}

func newDirCrashSteps(t *testing.T, syncfs bool, epoch int32) int64 {
	const logs = syncfsMinLogs
	for step := int64(1); ; step++ {
		fs := NewCrashFS(step)
		fs.SetDirPrefix(true)
		fs.SetSyncfs(syncfs)
		fs.MkdirAllForTest("/data")
		if step%2 == 1 {
			fs.CrashTornAfter(step)
		} else {
			fs.CrashAfter(step)
		}
		sy := NewSyncer(quiet)
		var ls []*Log
		for i := range logs {
			dir := fmt.Sprintf("/data/p-%d", i)
			if fs.MkdirAll(dir, 0o755) != nil {
				break
			}
			settle := func() error {
				if err := fs.SyncDir(dir); err != nil {
					return err
				}
				return fs.SyncDir("/data")
			}
			l, err := Open(dir, testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet, NewDir: true, Settle: settle})
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		durable := make([]int64, len(ls))
		for r := range 2 {
			round := map[*Log]struct{}{}
			for _, l := range ls {
				if _, err := l.Append(batch(t, 2, 50, int64(r)), epoch); err == nil {
					round[l] = struct{}{}
				}
			}
			sy.cycle(round)
			for i, l := range ls {
				durable[i] = l.DurableOffset()
			}
		}
		done := !fs.Down()
		if done && (len(ls) < logs || slices.Contains(durable, 0)) {
			t.Fatalf("without a power cut: %d logs opened, durable offsets %v", len(ls), durable)
		}
		fs.Crash()
		for _, l := range ls {
			l.Close() // on a crashed filesystem: nothing more reaches the disk
		}
		sy.Close()
		fs.Reboot()
		sy = NewSyncer(quiet)
		for i, want := range durable {
			dir := fmt.Sprintf("/data/p-%d", i)
			if _, err := fs.ReadDir(dir); err != nil {
				if want > 0 {
					t.Fatalf("step %d: %s is gone after the power cut, with offsets below %d declared durable", step, dir, want)
				}
				continue
			}
			l, err := Open(dir, testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet})
			if err != nil {
				t.Fatalf("step %d: %s does not open after the power cut: %v", step, dir, err)
			}
			if end := l.EndOffset(); end < want {
				t.Fatalf("step %d: %s ends at %d after the power cut, below the durable %d", step, dir, end, want)
			}
			l.Close()
		}
		sy.Close()
		if done {
			return step
		}
	}
}
