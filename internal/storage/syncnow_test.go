package storage

import (
	"errors"
	"syscall"
	"testing"
)

// SyncNow runs a Syncer cycle on the caller's goroutine: every log is
// durable up to its end when it returns nil for it, and a log whose fsync
// failed gets the error (and is failed) instead of an acknowledgement.
func TestSyncerSyncNow(t *testing.T) {
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	var logs []*Log
	for _, d := range []string{"/a", "/b", "/c", "/bad"} {
		l := openLog(t, fs, d, testConfig(), sy, nil)
		defer l.Close()
		if _, err := l.Append(batch(t, 3, 10, 1), 0); err != nil {
			t.Fatal(err)
		}
		logs = append(logs, l)
	}
	fs.InjectError(OpSync, "/bad/", syscall.EIO)
	errs := sy.SyncNow(logs)
	for i, l := range logs[:3] {
		if errs[i] != nil || l.DurableOffset() != l.EndOffset() {
			t.Fatalf("log %d: %v, durable %d of %d", i, errs[i], l.DurableOffset(), l.EndOffset())
		}
	}
	if !errors.Is(errs[3], syscall.EIO) || logs[3].DurableOffset() == logs[3].EndOffset() {
		t.Fatalf("failed fsync: %v, durable %d", errs[3], logs[3].DurableOffset())
	}
	if err := logs[0].SyncNow(); err != nil {
		t.Fatal(err) // nothing new: no fsync needed
	}
}
