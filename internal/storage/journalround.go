package storage

import (
	"encoding/binary"
	"fmt"
	"time"
)

// The sync cycle with a data journal (datajournal.go): which logs go into
// the journal, the old path for the others, and the logs' side of cuts
// and checkpoints.

// SetJournal makes s journal the logs under j's root that qualify (see
// datajournal.go). Call before any such log opens; nil turns it off.
func (s *Syncer) SetJournal(j *DataJournal) { s.journal = j }

// Journal is the data journal set by SetJournal (nil: none, or no Syncer).
func (s *Syncer) Journal() *DataJournal {
	if s == nil {
		return nil
	}
	return s.journal
}

// Capture outcomes.
const (
	jNothing = iota // nothing to sync
	jRecord         // journaled: its bytes are in the cycle's batch
	jOld            // takes the old path this cycle
)

// journalCapture puts l's new bytes into the cycle's batch if l qualifies
// (roundMu held): all of them still in the active segment's append
// buffer, its name durable, no seal or epoch checkpoint pending.
func (l *Log) journalCapture(j *DataJournal) (syncTicket, int) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.checkWritableLocked() != nil {
		return syncTicket{}, jOld // the old path reports it
	}
	if l.end <= l.durable.Load() && l.pendingSeal == nil && !l.epochsDirty {
		return syncTicket{}, jNothing
	}
	if l.jrel == "" || l.pendingSeal != nil || l.epochsDirty {
		return syncTicket{}, jOld
	}
	s := l.active()
	af, ok := s.f.(*appendFile)
	if !ok || !s.named || s.size <= s.jpos {
		return syncTicket{}, jOld
	}
	seq, ok := j.addDataLocked(l.jrel, s.base, s.jpos, int(s.size-s.jpos), func(dst []byte) ([]byte, bool) {
		return af.appendPending(dst, s.jpos, s.size)
	})
	if !ok {
		return syncTicket{}, jOld
	}
	j.dirLast[l.jrel] = seq
	j.markDirty(l) // before roundMu is released: a checkpoint's cut-off cannot pass it unflushed
	s.ref()
	t := syncTicket{l: l, s: s, size: s.size, end: l.end, gen: l.truncGen}
	if af.pendingBytes() >= journalWriteBehind {
		// Written behind now rather than when the buffer is full (256
		// KiB per log). Exactly the journaled
		// bytes are queued (no append runs under mu.RLock).
		af.Detach()
		t.writeBehind = af
	}
	return t, jRecord
}

// journalWriteBehind: a log's journaled bytes are written to its segment
// once this many wait in its buffer: under the 16 KiB buffer class (at
// 64 KiB, 1,000 logs held a 256 KiB buffer each: +170 MiB of RSS).
// (A variable: tests lower it.)
var journalWriteBehind int64 = 12 << 10

func (a *appendFile) pendingBytes() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pendingLocked()
}

// startWriteBehind writes the queued buffers in the background (unless a
// write-out runs already, which then writes them or leaves them for the
// next).
func (a *appendFile) startWriteBehind() {
	if a.writingBehind.CompareAndSwap(false, true) {
		go func() {
			a.WriteQueued()
			a.writingBehind.Store(false)
		}()
	}
}

// addDataLocked appends a data record of n bytes that fill appends (false:
// the bytes are not all in the buffers; nothing is added).
func (j *DataJournal) addDataLocked(rel string, base, pos int64, n int, fill func([]byte) ([]byte, bool)) (uint64, bool) {
	dp := dirPayload(rel)
	if !j.roomLocked(jrecHeader + len(dp) + 16 + n) {
		return 0, false
	}
	start := len(j.buf)
	var fixed [16]byte
	binary.LittleEndian.PutUint64(fixed[:], uint64(base))
	binary.LittleEndian.PutUint64(fixed[8:], uint64(pos))
	j.buf = appendJRec(j.buf, j.nextSeq, j.gen, jkData, dp, fixed[:])
	var ok bool
	j.buf, ok = fill(j.buf)
	if !ok || len(j.buf)-start != jrecHeader+len(dp)+16+n {
		j.buf = j.buf[:start]
		return 0, false
	}
	// The length and CRC cover the bytes appended after the header.
	rec := j.buf[start:]
	binary.LittleEndian.PutUint32(rec[4:], uint32(len(rec)-jrecHeader))
	binary.LittleEndian.PutUint32(rec, jcrc(rec[4:]))
	seq := j.nextSeq
	j.nextSeq++
	return seq, true
}

// appendPending appends the file's bytes [from, to) to dst if they are
// all still in the buffers (none written to the file yet).
func (a *appendFile) appendPending(dst []byte, from, to int64) ([]byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.written.Load()
	if a.broken != nil || from < w || to > w+a.pendingLocked() {
		return dst, false
	}
	pos := w
	for i := 0; i <= len(a.queued); i++ {
		buf := a.cur.data
		if i < len(a.queued) {
			buf = a.queued[i].data
		}
		lo, hi := max(from, pos), min(to, pos+int64(len(buf)))
		if lo < hi {
			dst = append(dst, buf[lo-pos:hi-pos]...)
		}
		pos += int64(len(buf))
	}
	return dst, true
}

// journalCycle is Syncer.cycle with a journal: one write and one
// fdatasync for the logs that qualify, the old path (write-out, one
// syncfs) for the others.
func (s *Syncer) journalCycle(batch map[*Log]struct{}) {
	j := s.journal
	s.cycles.Add(1)
	var tickets []syncTicket
	old := map[*Log]struct{}{}
	j.roundMu.Lock()
	if j.beginLocked() {
		for l := range batch {
			t, st := l.journalCapture(j)
			switch st {
			case jRecord:
				tickets = append(tickets, t)
			case jOld:
				old[l] = struct{}{}
			}
		}
	} else {
		old = batch
	}
	var err error
	if len(j.buf) > 0 { // records, or a new file's header alone
		start := time.Now()
		err = j.writeLocked()
		s.latency.Observe(time.Since(start))
		j.rounds.Add(1)
	}
	j.roundMu.Unlock()
	for _, t := range tickets {
		if e := t.syncEnd(err); e != nil {
			s.logger.Warn("storage: journal cycle failed", "dir", t.l.dir, "err", e)
		}
		if t.writeBehind != nil {
			t.writeBehind.startWriteBehind()
		}
	}
	j.journaled.Add(int64(len(tickets)))
	j.oldPath.Add(int64(len(old)))
	if len(old) > 0 {
		s.cycleOld(old, 1)
	}
}

// journalLock takes the journal's round lock for a change that a cut must
// precede (before any of l's locks); the returned func releases it.
func (l *Log) journalLock() func() {
	if l.journal == nil || l.jrel == "" {
		return func() {}
	}
	l.journal.roundMu.Lock()
	return l.journal.roundMu.Unlock
}

// journalCutLocked writes a durable cut record for l if the journal holds
// live records of it (journalLock and l.mu held). With flush, the bytes
// those records cover are first written out and fsynced in the segments
// (the active one and one waiting to be sealed): the cut hides the
// records, so what must survive has to be in the segments first.
func (l *Log) journalCutLocked(flush bool) error {
	j := l.journal
	if j == nil || l.jrel == "" || !j.hasLiveLocked(l.jrel) {
		return nil
	}
	if flush {
		for _, s := range []*segment{l.pendingSeal, l.active()} {
			if s == nil {
				continue
			}
			if err := s.f.Sync(); err != nil {
				return fmt.Errorf("storage: %s: writing out journaled bytes before a cut: %w", l.dir, err)
			}
		}
	}
	return j.cutLocked(l.jrel)
}

// journalSegs returns, referenced, the segments that may hold bytes l
// journaled (a checkpoint): its active segment and one waiting to be
// sealed. A log closed cleanly has none; one closed failed is an error:
// its journaled bytes are only in the journal, which must keep them
// until a restart replays them.
func (l *Log) journalSegs() ([]*segment, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		if l.jflushed {
			return nil, nil
		}
		return nil, fmt.Errorf("storage: %s: closed without writing out its journaled bytes", l.dir)
	}
	segs := []*segment{l.active()}
	if p := l.pendingSeal; p != nil {
		segs = append(segs, p)
	}
	for _, s := range segs {
		s.ref()
	}
	return segs, nil
}
