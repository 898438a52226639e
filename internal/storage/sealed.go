package storage

// SegmentRange is a closed segment as tiered storage sees it: the offsets
// [Base, Next), its bytes and its largest batch timestamp (-1: none).
type SegmentRange struct {
	Base, Next   int64
	Size         int64
	MaxTimestamp int64
}

// SealedSegments lists the log's segments other than the active one, oldest
// first, that are sealed and wholly durable (Next <= DurableOffset): what
// tiered storage may upload. Reading them goes through Read like any other
// reader, so a segment deleted meanwhile shows up as ErrOffsetOutOfRange.
func (l *Log) SealedSegments() ([]SegmentRange, error) {
	// The write lock, as RetentionPoint: a timestamp may load an index.
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	durable := l.durable.Load()
	var out []SegmentRange
	for _, s := range l.segs[:len(l.segs)-1] {
		if s.next > durable || s == l.pendingSeal {
			break
		}
		ts, _, err := s.maxTimestamp(l)
		if err != nil {
			return out, err
		}
		out = append(out, SegmentRange{Base: max(s.base, l.start), Next: s.next, Size: s.size, MaxTimestamp: ts})
	}
	return out, nil
}
