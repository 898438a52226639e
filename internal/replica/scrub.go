package replica

import (
	"errors"
	"time"

	"holdfast/internal/storage"
)

// The scrubber reads every replica's log at a bounded rate
// (log.scrub.bytes.per.second; 0: off) and checks the CRC of every batch
// that was not checked since this process opened it: data written by an
// earlier process, which reads check only when they reach it (cold data
// that nobody reads would otherwise rot unseen until a failover makes this
// replica the one that serves it). Corrupt data stops the replica's group
// and the repair loop rebuilds it from the others (repair.go). A pass that
// finds nothing left to check ends; the next one starts scrubPassEvery
// after the last began, forgetting what was checked (reads check cold
// bytes again then, once), so bytes that change while the process runs
// are found too: within about an hour plus a pass.

const (
	scrubPassEvery = time.Hour
	scrubStepMax   = 1 << 20
	// scrubStartDelay: the first pass starts this long after Start.
	scrubStartDelay = 3 * time.Second
)

func (m *Manager) scrubLoop(stop <-chan struct{}) {
	rate := m.cfg.ScrubBytesPerSecond
	step := int(min(max(rate/10, 64<<10), scrubStepMax))
	wait := func(d time.Duration) bool {
		t := m.clk.NewTimer(d)
		defer t.Stop()
		select {
		case <-stop:
			return false
		case <-t.C:
			return true
		}
	}
	// Start-up reads the newest data first (recovery, Raft catching up):
	// the first pass waits a little.
	if !wait(scrubStartDelay) {
		return
	}
	for pass := 0; ; pass++ {
		began := m.clk.Now()
		if pass > 0 {
			for _, p := range m.parts.Partitions("") {
				p.Log().Unverify()
			}
		}
		for _, p := range m.parts.Partitions("") {
			for more := true; more; {
				n, left, err := p.Scrub(step)
				more = left
				m.scrubbed.Add(int64(n))
				if err != nil {
					if !errors.Is(err, storage.ErrCorrupt) && !errors.Is(err, storage.ErrClosed) && !errors.Is(err, storage.ErrFailed) {
						m.log.Debug("scrub: skipping a log", "topic", p.Topic(), "partition", p.Index(), "err", err)
					}
					break // a corrupt one is reported and repaired (storageError)
				}
				if n > 0 && !wait(time.Duration(float64(n)/float64(rate)*float64(time.Second))) {
					return
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}
		if !wait(max(began.Add(scrubPassEvery).Sub(m.clk.Now()), time.Minute)) {
			return
		}
	}
}
