package storage

// RetentionPoint answers "what would retention delete": the log start
// offset that deleting the segments past retention.ms or beyond
// retention.bytes would leave (StartOffset() if none would go), always a
// segment boundary. Nothing is deleted: a Raft log's front may move only
// through raft.Host.Compact, on every replica alike, so the replica's
// leader asks here and replicates the answer (replica/retention.go).
func (l *Log) RetentionPoint() (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	var total int64
	for _, s := range l.segs {
		total += s.size
	}
	nowMs := l.now().UnixMilli()
	point := l.start
	// Oldest first; the active segment always stays.
	for k := 0; k+1 < len(l.segs); k++ {
		s := l.segs[k]
		del := false
		if l.cfg.RetentionBytes >= 0 && total-s.size >= l.cfg.RetentionBytes {
			del = true
		} else if l.cfg.RetentionMs >= 0 {
			ts, _, err := s.maxTimestamp(l)
			if err != nil {
				return point, err
			}
			del = ts >= 0 && ts < nowMs-l.cfg.RetentionMs.Milliseconds()
		}
		if !del {
			break
		}
		total -= s.size
		point = max(point, l.segs[k+1].base)
	}
	return point, nil
}
