package storage

import (
	"fmt"
	"testing"
)

// TestGroupEpochCheckpointCrashAtEveryStep: logs whose sync cycle is one
// syncfs (Syncer.syncGroup) write a new epoch's checkpoint to its temp
// file unsynced, rename it after the syncfs and make the rename durable
// with a second one; a new log's first checkpoint is written in place,
// unsynced, and made durable by the syncfs alone (epochsInPlaceLocked).
// A power cut (clean or torn, directory changes kept in
// order or not) at every step of three cycles, each opening an epoch in
// every log, leaves every acknowledged batch, and a checkpoint on disk that
// lists the epoch of each (invariant 5b: checked on the file, since
// recovery's scan of the tail would bring the epochs back anyway).
func TestGroupEpochCheckpointCrashAtEveryStep(t *testing.T) {
	sy := NewSyncer(quiet)
	defer sy.Close()
	const logs, rounds = 4, 3
	type state struct {
		m       [logs]model
		durable [logs]int64
		epochOf [logs]map[int64]int32 // base offset -> epoch appended with
	}
	run := func(fs *CrashFS, crashAt int64, torn bool) (st state) {
		fs.SetSyncfs(true)
		var ls []*Log
		for i := range logs {
			l, err := Open(fmt.Sprintf("/d%d", i), testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ls = append(ls, l)
			st.epochOf[i] = map[int64]int32{}
		}
		switch {
		case crashAt > 0 && torn:
			fs.CrashTornAfter(crashAt)
		case crashAt > 0:
			fs.CrashAfter(crashAt)
		}
		for r := range rounds {
			batch0 := map[*Log]struct{}{}
			for i, l := range ls {
				b := batch(t, 1, 100, int64(r))
				info, err := l.Append(b, int32(r+1))
				if err != nil {
					return st
				}
				st.m[i].batches = append(st.m[i].batches, b)
				st.m[i].ords = append(st.m[i].ords, info.Ordinal)
				st.epochOf[i][info.BaseOffset] = int32(r + 1)
				batch0[l] = struct{}{}
			}
			sy.cycle(batch0)
			for i, l := range ls {
				st.durable[i] = l.DurableOffset()
			}
		}
		return st
	}
	probe := NewCrashFS(1)
	before := sy.Stats().Syncfs
	if st := run(probe, 0, false); st.durable[logs-1] != rounds {
		t.Fatalf("without a crash: durable %v", st.durable)
	}
	if n := sy.Stats().Syncfs - before; n != 2*rounds-1 {
		t.Fatalf("%d syncfs calls for %d cycles opening epochs, want one for the first (in place), two for each other", n, rounds)
	}
	steps := probe.Ops()
	for k := int64(1); k <= 4*steps; k++ {
		n, torn, prefix := (k+3)/4, k%2 == 0, k%4 >= 2
		fs := NewCrashFS(k)
		fs.SetDirPrefix(prefix)
		st := run(fs, n, torn)
		if torn {
			fs.CrashTorn()
		} else {
			fs.Crash()
		}
		fs.Reboot()
		for i := range logs {
			dir := fmt.Sprintf("/d%d", i)
			var onDisk []epochEntry
			if b, ok := fs.ReadFileForTest(dir + "/" + epochCheckpoint); ok {
				var err error
				if onDisk, err = parseEpochCheckpoint(b); err != nil && st.durable[i] > 0 {
					// Only the first checkpoint, written in place, may be
					// torn, and only before any batch is durable.
					t.Fatalf("crash after step %d (torn %v): %s: damaged checkpoint %q: %v", n, torn, dir, b, err)
				}
			}
			for off, e := range st.epochOf[i] {
				if off >= st.durable[i] {
					continue
				}
				found := false
				for _, x := range onDisk {
					found = found || x == epochEntry{e, off}
				}
				if !found {
					t.Fatalf("crash after step %d of %d (torn %v): %s: batch %d of epoch %d was durable, the checkpoint on disk lists %v", n, steps, torn, dir, off, e, onDisk)
				}
			}
			l, err := Open(dir, testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet})
			if err != nil {
				t.Fatalf("crash after step %d: reopen %s: %v", n, dir, err)
			}
			st.m[i].verify(t, l, st.durable[i])
			for off, e := range st.epochOf[i] {
				if got := l.EpochAt(off); off < st.durable[i] && got != e {
					t.Fatalf("crash after step %d (torn %v): %s: reopened, offset %d has epoch %d, want %d", n, torn, dir, off, got, e)
				}
			}
			l.Close()
		}
	}
}

// TestEpochCheckpointPrefixNeverParses: a first checkpoint is written in
// place, unsynced (epochsInPlaceLocked), so a power cut can leave any
// prefix of it; none may parse, or recovery would trust a wrong epoch
// start ("12 10" from "12 100") instead of rebuilding from the batches.
func TestEpochCheckpointPrefixNeverParses(t *testing.T) {
	for _, whole := range []string{"0\n1\n12 100\n", "0\n2\n3 0\n15 1024\n"} {
		if _, err := parseEpochCheckpoint([]byte(whole)); err != nil {
			t.Fatalf("%q: %v", whole, err)
		}
		for n := range len(whole) {
			if e, err := parseEpochCheckpoint([]byte(whole[:n])); err == nil {
				t.Fatalf("prefix %q of %q parsed as %v", whole[:n], whole, e)
			}
		}
	}
}
