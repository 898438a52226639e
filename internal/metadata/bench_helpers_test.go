package metadata

import "testing"

// benchLoad applies cmds after end and snapshots the result, as a store
// restarted with that much metadata would hold it.
func benchLoad(b *testing.B, s *Store, end int64, cmds []Command) int64 {
	for _, c := range cmds {
		end++
		if _, err := s.Apply(end, c); err != nil {
			b.Fatal(err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.snapshotNowLocked(); err != nil {
		b.Fatal(err)
	}
	return end
}

// benchFlush waits for a snapshot the timed loop started: its cost is the
// loop's.
func benchFlush(b *testing.B, s *Store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.snap.writing {
		s.snap.idle.Wait()
	}
}
