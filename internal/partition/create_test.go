package partition

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"holdfast/internal/raft"
	"holdfast/internal/storage"
)

// TestNewPartitionCrashAtEveryStep: a power cut at every step of creating
// a partition (its directory, partition.metadata and first segment, made
// durable together by settleNew) and acknowledging its first records, torn
// or not, directory changes persisting in order. After it, the partition
// opens under its topic (a claim the cut tore in a directory without data
// is claimed again, never refused as foreign), and holds the acknowledged
// records.
func TestNewPartitionCrashAtEveryStep(t *testing.T) {
	ctx := hangGuard(t)
	for step := int64(1); ; step++ {
		fsys, m := crashStep(t, step)
		acked := false
		func() {
			p, err := m.Open("t", [16]byte{7}, 0, storage.DefaultConfig())
			if err != nil {
				return
			}
			res, err := p.Append(batch(t, -1, -1, -1, 3))
			if err != nil || p.WaitCommitted(ctx(), res.LastOffset+1) != nil {
				return
			}
			acked = true
		}()
		var done bool
		m, done = reboot(t, fsys, m)
		p, err := m.Open("t", [16]byte{7}, 0, storage.DefaultConfig())
		if err != nil {
			t.Fatalf("step %d (acked %v): the partition does not open after the power cut: %v", step, acked, err)
		}
		end := p.LogEndOffset()
		if end != 0 && end != 3 || acked && end != 3 {
			t.Fatalf("step %d (acked %v): log end %d, want the 3 acknowledged records (0 if unacknowledged)", step, acked, end)
		}
		// The new group's conf state is not flushed at its open: it goes
		// to the Raft journal with the group's first records, or is lost
		// with them and derived from the voters again. Either way the
		// group leads again as its only voter, in a term above the
		// records' epoch, and takes a write at the log's end, kept
		// across a clean restart.
		if st, err := m.host.Status(p.RaftGroup()); err != nil || !slices.Equal(st.Voters, []uint64{1}) || st.State != raft.StateLeader {
			t.Fatalf("step %d: after the power cut the group is %+v (%v), want led by its only voter 1", step, st, err)
		}
		mustAppend(t, p, batch(t, -1, -1, -1, 2), end, false)
		if e := p.LeaderEpoch(); end > 0 && e < 2 {
			t.Fatalf("step %d: leader epoch %d after a restart over records of epoch >= 1", step, e)
		}
		m.stop()
		m = newCrashNode(t, fsys, "/data")
		if p, err = m.Open("t", [16]byte{7}, 0, storage.DefaultConfig()); err != nil {
			t.Fatalf("step %d: after a clean restart: %v", step, err)
		}
		if got := p.LogEndOffset(); got != end+2 {
			t.Fatalf("step %d: after a clean restart the log ends at %d, want %d", step, got, end+2)
		}
		m.stop()
		if done {
			t.Logf("%d steps", step)
			return
		}
	}
}

// TestTornClaimClaimedAgainOnlyWithoutData: a partition.metadata a power
// cut tore (written straight into a new directory, claimNewDir, and made
// durable by a syncfs that did not finish) is claimed again when the
// directory holds no batch - nothing was appended before the claim was
// durable - and refused as before when it does: a directory with data and
// no whole claim is never taken as the opening topic's.
func TestTornClaimClaimedAgainOnlyWithoutData(t *testing.T) {
	for _, torn := range []string{"", "version: 0\n", "version: 0\ntopic_id: ", "version: 0\ntopic_id: BwAAAAAA", "\x00\x00\x00\x00"} {
		fsys := storage.NewCrashFS(1)
		fsys.WriteFileForTest("/data/t-0/"+metadataFile, []byte(torn))
		fsys.WriteFileForTest("/data/t-0/00000000000000000000.log", nil)
		m := newCrashNode(t, fsys, "/data")
		p, err := m.Open("t", [16]byte{7}, 0, storage.DefaultConfig())
		if err != nil {
			t.Fatalf("claim %q, no data: open: %v", torn, err)
		}
		mustAppend(t, p, batch(t, -1, -1, -1, 3), 0, false)
		m.powerCut(fsys, false)
		if b, _ := fsys.ReadFileForTest("/data/t-0/" + metadataFile); string(b) != string(claimData([16]byte{7})) {
			t.Fatalf("claim %q, no data: partition.metadata after the open and a power cut: %q", torn, b)
		}
		m = newCrashNode(t, fsys, "/data")
		if p, err = m.Open("t", [16]byte{7}, 0, storage.DefaultConfig()); err != nil || p.LogEndOffset() != 3 {
			t.Fatalf("claim %q, no data: reopened: %v", torn, err)
		}
		m.stop()

		// The same torn claims over a directory with data.
		fsys.WriteFileForTest("/data/t-0/"+metadataFile, []byte(torn))
		m = newCrashNode(t, fsys, "/data")
		_, err = m.Open("t", [16]byte{7}, 0, storage.DefaultConfig())
		if err == nil || !errors.Is(err, ErrForeignData) && !strings.Contains(err.Error(), "no topic_id") {
			t.Fatalf("claim %q over data: open: %v, want it refused", torn, err)
		}
		if b, _ := fsys.ReadFileForTest("/data/t-0/" + metadataFile); string(b) != torn {
			t.Fatalf("claim %q over data: rewritten to %q", torn, b)
		}
		m.stop()
	}
}
