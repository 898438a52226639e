package raft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/storage"
)

// The hardstate journal: one append-only file per node holding, for every
// group, its HardState, ConfState, log anchor and side entries (the Raft
// entries that are not record batches: store.go). One write (and, when a
// term or vote changed, one fsync) per Ready cycle covers all groups, so a
// thousand groups do not cost a thousand fsyncs. Replay keeps the last
// record per group and kind; when the file grows well past the live state
// it is rewritten (tmp + fsync + rename + fsync dir).
//
// Record: u32 body length | u32 CRC-32C(body) | body.
// Body:   u8 kind | u64 group | payload.
const (
	jHardState = 1 // u64 term, u64 vote, u64 commit, u64 applied
	jAnchor    = 2 // u64 index, u64 term, i64 offset, u8 done
	jConfState = 3 // u64 index it was applied at, protobuf ConfState
	jRemoved   = 4 // group removed: forget it
	jEntry     = 5 // a side entry: u64 index, u64 term, i64 offset, u8 type, data
	jTruncate  = 6 // u64 index: forget side entries at and above it
	jTrusted   = 7 // the replica caught up in this directory: it may vote
	jRejoin    = 8 // the replica's data was discarded: it must catch up before it votes

	journalName   = "raft-state.journal"
	maxJournalRec = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type groupState struct {
	// hs: the HardState, in a snapshot's copy only; the journal's own
	// keeps it as values (hv): a *pb.HardState with its three
	// pointer fields was ~0.1 KiB per group (issue 27).
	hs         *pb.HardState
	hv         hsValues
	applied    uint64 // every entry up to here was applied (lags by a cycle)
	cs         *pb.ConfState
	csIndex    uint64 // the index of the conf change cs results from
	anc        anchor
	ancPending bool        // a snapshot install began but did not finish
	side       []sideEntry // by index, all above anc.Index
	// trusted: this replica caught up with a leader after opening as a
	// rejoining one (a replaced disk): it votes from now on.
	trusted bool
	// rejoin: this replica's data was discarded (a repaired storage
	// failure): it must catch up before it votes, whatever the metadata
	// says, until trusted.
	rejoin bool
}

// hsValues is a HardState held by the journal (ok: one was recorded).
type hsValues struct {
	term, vote, commit uint64
	ok                 bool
}

func (v hsValues) proto() *pb.HardState {
	return &pb.HardState{Term: new(v.term), Vote: new(v.vote), Commit: new(v.commit)}
}

// sideEntry is a Raft entry that is not a record batch, and the offset it
// sits at: the end of the data entries before it.
type sideEntry struct {
	Index, Term uint64
	Offset      int64
	Type        pb.EntryType
	Data        []byte
}

func (e sideEntry) entry() *pb.Entry {
	return &pb.Entry{Index: new(e.Index), Term: new(e.Term), Type: e.Type.Enum(), Data: e.Data}
}

// truncateSide drops the entries at and above index.
func truncateSide(side []sideEntry, index uint64) []sideEntry {
	for len(side) > 0 && side[len(side)-1].Index >= index {
		side = side[:len(side)-1]
	}
	return side
}

// compactSide drops the entries at and below index.
func compactSide(side []sideEntry, index uint64) []sideEntry {
	k := 0
	for k < len(side) && side[k].Index <= index {
		k++
	}
	if k == 0 {
		return side
	}
	return append([]sideEntry(nil), side[k:]...)
}

type journal struct {
	path   string
	fs     storage.FS
	logger *slog.Logger

	// flushMu serializes flushes (and close): the file, its size and
	// checkAt change under it. mu guards the rest, and is not held through
	// a flush's write and fsync, so that the Ready loop's puts and
	// AddGroup's snapshot of a group do not wait behind a disk flush.
	// Lock order: flushMu, then mu.
	flushMu sync.Mutex
	mu      sync.Mutex
	f       storage.File
	size    int64
	buf     []byte
	spare   []byte // the buffer the last flush wrote, for reuse
	dirty   bool   // buf holds records that must be fsynced (term, vote, anchor, conf)
	groups  map[uint64]*groupState
	// checkAt is the size at which flush next measures the live state
	// (a walk of every group) to decide on a rewrite.
	checkAt int64
	// fileMu: putAnchorSynced's fsync holds it shared, after letting go
	// of flushMu; closing f (a rewrite, close) holds it exclusively.
	// Lock order: flushMu, then mu, then fileMu.
	fileMu sync.RWMutex
}

// maxJournalSize bounds what open reads (the live state of 1M groups fits).
const maxJournalSize = 1 << 30

func openJournal(fsys storage.FS, dir string, logger *slog.Logger) (*journal, error) {
	// A new directory's name is durable before the journal in it is.
	if err := storage.MkdirAllDurable(fsys, dir); err != nil {
		return nil, err
	}
	j := &journal{path: filepath.Join(dir, journalName), fs: fsys, logger: logger, groups: map[uint64]*groupState{}}
	f, err := fsys.OpenFile(j.path, os.O_RDWR|os.O_APPEND, 0o644)
	if errors.Is(err, os.ErrNotExist) {
		if f, err = fsys.OpenFile(j.path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			err = fsys.SyncDir(dir) // the file itself must survive a power loss
		}
	}
	if err != nil {
		return nil, err
	}
	size, err := f.Size()
	if err == nil && size > maxJournalSize {
		err = fmt.Errorf("raft: journal %s is %d bytes, over %d", j.path, size, maxJournalSize)
	}
	data := make([]byte, max(size, 0))
	if err == nil && size > 0 {
		_, err = f.ReadAt(data, 0)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	good, rerr := j.replay(data)
	if rerr != nil {
		// A whole record with a valid CRC that this binary cannot read
		// is neither a torn tail nor damage: a newer Holdfast wrote it.
		// Cutting it (or moving the directory aside as corrupt) would
		// forget what it holds; the file stays as it is.
		f.Close()
		logger.Error("raft: journal holds a record this binary cannot read: refusing to start the Raft groups", "path", j.path, "at", good, "err", rerr)
		var kind unknownKind
		if errors.As(rerr, &kind) {
			rerr = &storage.FormatError{Path: fmt.Sprintf("%s (record at byte %d)", j.path, good), What: "record kind",
				Found: strconv.Itoa(int(kind)), Known: journalKinds}
			return nil, fmt.Errorf("raft: %w", rerr)
		}
		return nil, fmt.Errorf("raft: %s: the record at byte %d has a valid checksum but cannot be read (%w): "+
			"not a torn tail, so it is not cut; a newer Holdfast may have written it", j.path, good, rerr)
	}
	if good < len(data) {
		if at, ok := validRecordAfter(data, good); ok {
			// A torn tail is only the last, partial record: a good record
			// after the bad one means the file changed in the middle. What
			// the bad record held (a group's term and vote, an anchor, a
			// side entry) is unknown, so no group of this node may go on
			// from this journal: cutting it here forgot every newer vote,
			// and a node could vote twice in one term.
			f.Close()
			logger.Error("raft: journal is corrupt in the middle: refusing to start the Raft groups", "path", j.path, "size", len(data), "bad_record_at", good, "good_record_at", at)
			return nil, fmt.Errorf("%w: %s: a bad record at byte %d is followed by a good one at byte %d (not a torn tail); "+
				"a node of a cluster moves its data directory aside and rejoins as a replaced disk, copying its replicas from the others and voting only once caught up; a single node has nothing to copy from: move the data directory aside to start empty, or restore it",
				ErrJournalCorrupt, j.path, good, at)
		}
		logger.Warn("raft: journal has a torn tail, cut", "path", j.path, "size", len(data), "kept", good)
		if err := f.Truncate(int64(good)); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, err
		}
	}
	j.f, j.size = f, int64(good)
	return j, nil
}

// ErrJournalCorrupt: the hard-state journal has a bad record with good
// ones after it. The node's groups do not start.
var ErrJournalCorrupt = errors.New("raft: hard-state journal corrupt")

// recordAt returns the body of the whole record with a valid CRC at pos.
func recordAt(data []byte, pos int) ([]byte, bool) {
	if len(data)-pos < 8 {
		return nil, false
	}
	n := int(binary.BigEndian.Uint32(data[pos:]))
	if n < 9 || n > maxJournalRec || len(data)-pos-8 < n {
		return nil, false
	}
	body := data[pos+8 : pos+8+n]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(data[pos+4:]) {
		return nil, false
	}
	return body, true
}

// validRecordAfter looks for a whole record with a valid CRC (and a kind)
// starting anywhere after pos, where replay stopped.
func validRecordAfter(data []byte, pos int) (int, bool) {
	for q := pos + 1; q+8+9 <= len(data); q++ {
		// Any kind: a valid record of a kind this binary does not know
		// still shows the file goes on past the bad one.
		if body, ok := recordAt(data, q); ok && body[0] != 0 {
			return q, true
		}
	}
	return 0, false
}

// replay applies every whole, valid record and returns the length they
// cover, and the error of a whole record (its CRC valid) that this binary
// cannot read, where it stopped.
func (j *journal) replay(data []byte) (int, error) {
	pos := 0
	for len(data)-pos >= 8 {
		body, ok := recordAt(data, pos)
		if !ok {
			break
		}
		n := len(body)
		if err := j.apply(body); err != nil {
			return pos, err
		}
		pos += 8 + n
	}
	return pos, nil
}

type unknownKind byte

func (k unknownKind) Error() string { return fmt.Sprintf("unknown journal record kind %d", byte(k)) }

// journalKinds are the record kinds this binary reads. The journal has no
// version header (a release before it would take a header record for a
// torn tail and cut the whole file): its record kinds are its version, and
// a new kind is how a newer format shows.
var journalKinds = []int{jHardState, jAnchor, jConfState, jRemoved, jEntry, jTruncate, jTrusted, jRejoin}

func (j *journal) state(g uint64) *groupState {
	s := j.groups[g]
	if s == nil {
		s = &groupState{}
		j.groups[g] = s
	}
	return s
}

func (j *journal) apply(body []byte) error {
	kind, g, p := body[0], binary.BigEndian.Uint64(body[1:9]), body[9:]
	be := binary.BigEndian
	switch kind {
	case jHardState:
		if len(p) != 32 {
			return errors.New("bad hardstate record")
		}
		s := j.state(g)
		s.hv = hsValues{term: be.Uint64(p), vote: be.Uint64(p[8:]), commit: be.Uint64(p[16:]), ok: true}
		s.applied = max(s.applied, be.Uint64(p[24:]))
	case jAnchor:
		if len(p) != 25 {
			return errors.New("bad anchor record")
		}
		s := j.state(g)
		s.anc = anchor{Index: be.Uint64(p), Term: be.Uint64(p[8:]), Offset: int64(be.Uint64(p[16:]))}
		s.ancPending = p[24] == 0
		s.side = compactSide(s.side, s.anc.Index)
	case jConfState:
		if len(p) < 8 {
			return errors.New("bad confstate record")
		}
		cs := &pb.ConfState{}
		if err := proto.Unmarshal(p[8:], cs); err != nil {
			return err
		}
		s := j.state(g)
		s.cs, s.csIndex = cs, be.Uint64(p)
	case jRemoved:
		delete(j.groups, g)
	case jEntry:
		if len(p) < 25 {
			return errors.New("bad entry record")
		}
		e := sideEntry{Index: be.Uint64(p), Term: be.Uint64(p[8:]), Offset: int64(be.Uint64(p[16:])),
			Type: pb.EntryType(p[24]), Data: append([]byte(nil), p[25:]...)}
		s := j.state(g)
		s.side = append(truncateSide(s.side, e.Index), e)
	case jTrusted:
		s := j.state(g)
		s.trusted, s.rejoin = true, false
	case jRejoin:
		s := j.state(g)
		s.trusted, s.rejoin = false, true
	case jTruncate:
		if len(p) != 8 {
			return errors.New("bad truncate record")
		}
		s := j.state(g)
		s.side = truncateSide(s.side, be.Uint64(p))
	default:
		return unknownKind(kind)
	}
	return nil
}

// appendRecord appends one record, built in place: a store round journals a
// HardState per group with a new commit, 1,000 of them a round at 1,000
// partitions, and a body allocated per record was most of their garbage.
func appendRecord(dst []byte, kind byte, g uint64, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0) // length and CRC, filled below
	dst = append(dst, kind)
	dst = binary.BigEndian.AppendUint64(dst, g)
	dst = append(dst, payload...)
	body := dst[start+8:]
	binary.BigEndian.PutUint32(dst[start:], uint32(len(body)))
	binary.BigEndian.PutUint32(dst[start+4:], crc32.Checksum(body, castagnoli))
	return dst
}

// hsPayload fills p (the caller's, often on its stack) with a HardState
// record's payload.
func hsPayload(p *[32]byte, hs *pb.HardState, applied uint64) []byte {
	binary.BigEndian.PutUint64(p[0:], hs.GetTerm())
	binary.BigEndian.PutUint64(p[8:], hs.GetVote())
	binary.BigEndian.PutUint64(p[16:], hs.GetCommit())
	binary.BigEndian.PutUint64(p[24:], applied)
	return p[:]
}

func csPayload(cs *pb.ConfState, index uint64) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend(binary.BigEndian.AppendUint64(nil, index), cs)
}

func anchorPayload(a anchor, done bool) []byte {
	p := binary.BigEndian.AppendUint64(nil, a.Index)
	p = binary.BigEndian.AppendUint64(p, a.Term)
	p = binary.BigEndian.AppendUint64(p, uint64(a.Offset))
	if done {
		return append(p, 1)
	}
	return append(p, 0)
}

// putHardState buffers a HardState and the applied index; mustSync when
// term or vote changed.
func (j *journal) putHardState(g uint64, hs *pb.HardState, applied uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.state(g)
	if !s.hv.ok || s.hv.term != hs.GetTerm() || s.hv.vote != hs.GetVote() {
		j.dirty = true
	}
	s.hv = hsValues{term: hs.GetTerm(), vote: hs.GetVote(), commit: hs.GetCommit(), ok: true}
	s.applied = max(s.applied, applied)
	var p [32]byte
	j.buf = appendRecord(j.buf, jHardState, g, hsPayload(&p, hs, s.applied))
}

// putConfState buffers the ConfState that applying the conf change at
// index produced; sync: it must be fsynced with the next flush.
func (j *journal) putConfState(g uint64, cs *pb.ConfState, index uint64, sync bool) error {
	return j.putConfStateOwned(g, cloneCS(cs), index, sync)
}

// putConfStateOwned is putConfState of a ConfState nobody changes from
// now on: the journal keeps it, and hands it out (snapshot) as it is.
func (j *journal) putConfStateOwned(g uint64, cs *pb.ConfState, index uint64, sync bool) error {
	p, err := csPayload(cs, index)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.state(g)
	s.cs, s.csIndex = cs, index
	j.buf = appendRecord(j.buf, jConfState, g, p)
	j.dirty = j.dirty || sync
	return nil
}

func (j *journal) putAnchor(g uint64, a anchor, done bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.state(g)
	s.anc, s.ancPending = a, !done
	s.side = compactSide(s.side, a.Index)
	j.buf = appendRecord(j.buf, jAnchor, g, anchorPayload(a, done))
	j.dirty = true
}

// putAnchorSynced journals a compaction's anchor (Host.Compact) and
// returns once it is fsynced. It holds flushMu only while it writes the
// buffered records, not through the fsync: the store round's flush, on
// every produce's path, waits for a write to the page cache at most, never
// for this fsync (issue 28: a remote upload's local delete stalled
// produce behind it). An fsync covers every write before it, so what the
// store round writes meanwhile takes nothing from it. When a buffered
// record needs an fsync of its own (dirty: a term, a vote, a side entry)
// it is the plain flush(true): the store round relies on those being
// durable once its flush returns, so they are not written here unsynced.
func (j *journal) putAnchorSynced(g uint64, a anchor) error {
	j.flushMu.Lock()
	j.mu.Lock()
	if j.f == nil || j.dirty {
		j.mu.Unlock()
		j.flushMu.Unlock()
		j.putAnchor(g, a, true)
		return j.flush(true)
	}
	s := j.state(g)
	s.anc, s.ancPending = a, false
	s.side = compactSide(s.side, a.Index)
	b := appendRecord(j.buf, jAnchor, g, anchorPayload(a, true))
	j.buf, j.spare = j.spare[:0], nil
	j.mu.Unlock()
	n, err := j.f.Write(b)
	j.size += int64(n)
	j.mu.Lock()
	j.spare = b[:0]
	if err != nil {
		j.dirty = true // as in flush: the host fails the cycle
		j.mu.Unlock()
		j.flushMu.Unlock()
		return fmt.Errorf("raft: journal write: %w", err)
	}
	j.mu.Unlock()
	f := j.f
	j.fileMu.RLock() // before flushMu goes: no rewrite closes f under the fsync
	j.flushMu.Unlock()
	err = f.Sync()
	j.fileMu.RUnlock()
	if err != nil {
		j.mu.Lock()
		j.dirty = true // not known durable: the next flush fsyncs again
		j.mu.Unlock()
		return fmt.Errorf("raft: journal fsync: %w", err)
	}
	return nil
}

func entryPayload(e sideEntry) []byte {
	p := binary.BigEndian.AppendUint64(nil, e.Index)
	p = binary.BigEndian.AppendUint64(p, e.Term)
	p = binary.BigEndian.AppendUint64(p, uint64(e.Offset))
	p = append(p, byte(e.Type))
	return append(p, e.Data...)
}

// putEntry buffers a side entry (it replaces any at or above its index).
// It must be fsynced before any data entry after it reaches the log: see
// store.go.
func (j *journal) putEntry(g uint64, e sideEntry) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.state(g)
	s.side = append(truncateSide(s.side, e.Index), e)
	j.buf = appendRecord(j.buf, jEntry, g, entryPayload(e))
	j.dirty = true
}

// putTrusted records that the group's replica caught up after rejoining.
func (j *journal) putTrusted(g uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.state(g)
	s.trusted, s.rejoin = true, false
	j.buf = appendRecord(j.buf, jTrusted, g, nil)
	j.dirty = true
}

// putRejoin records that the group's replica lost its data here.
func (j *journal) putRejoin(g uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.state(g)
	s.trusted, s.rejoin = false, true
	j.buf = appendRecord(j.buf, jRejoin, g, nil)
	j.dirty = true
}

// putTruncate buffers "forget side entries at and above index".
func (j *journal) putTruncate(g uint64, index uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.state(g)
	s.side = truncateSide(s.side, index)
	j.buf = appendRecord(j.buf, jTruncate, g, binary.BigEndian.AppendUint64(nil, index))
	j.dirty = true
}

func (j *journal) remove(g uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.groups, g)
	j.buf = appendRecord(j.buf, jRemoved, g, nil)
	j.dirty = true
}

// snapshot returns a copy of a group's persisted state (zero if none).
func (j *journal) snapshot(g uint64) groupState {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.groups[g]
	if s == nil {
		return groupState{}
	}
	out := *s
	if s.hv.ok {
		out.hs = s.hv.proto()
	}
	// out.cs is shared: a ConfState, once journaled or stored, is never
	// changed in place (putConfState and the store keep copies of what
	// they are given and replace them whole), so the group's store holds
	// the journal's instead of a second copy (~0.2 KiB a group, issue 27).
	out.side = append([]sideEntry(nil), s.side...)
	return out
}

// flush writes the buffered records, fsyncing if any needs it (or force).
// Everything buffered before the call is written (and fsynced, if it
// needed it) when it returns. Records buffered while it writes wait for
// the next flush.
func (j *journal) flush(force bool) error {
	j.flushMu.Lock()
	defer j.flushMu.Unlock()
	j.mu.Lock()
	if j.f == nil {
		j.mu.Unlock()
		return errors.New("raft: journal closed")
	}
	b, sync := j.buf, j.dirty || force
	j.buf, j.spare, j.dirty = j.spare[:0], nil, false
	j.mu.Unlock()
	var err error
	if len(b) > 0 {
		var n int
		n, err = j.f.Write(b)
		j.size += int64(n)
		if err != nil {
			err = fmt.Errorf("raft: journal write: %w", err)
		}
	}
	if err == nil && sync {
		if serr := j.f.Sync(); serr != nil {
			err = fmt.Errorf("raft: journal fsync: %w", serr)
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err != nil {
		// Not fsynced: the next flush must fsync again. (A failed write
		// leaves the file in an unknown state, as it always did: the host
		// fails the cycle.)
		j.dirty = j.dirty || sync
		return err
	}
	j.spare = b[:0]
	if j.size <= max(4<<20, j.checkAt) {
		return nil
	}
	// Measuring walks every group: with thousands of them, doing it at
	// every flush was most of a start-up's CPU. A journal that is not
	// large enough yet to rewrite is measured again once it has grown by
	// the live size (amortized, a constant per byte written).
	live := j.liveSizeLocked()
	if j.size > 8*live {
		return j.rewriteLocked()
	}
	j.checkAt = j.size + live
	return nil
}

// liveSizeLocked estimates the size of the live state.
func (j *journal) liveSizeLocked() int64 {
	n := int64(len(j.groups)) * 128
	for _, s := range j.groups {
		for _, e := range s.side {
			n += 40 + int64(len(e.Data))
		}
	}
	return n
}

// rewriteLocked replaces the file by one holding only the live state.
// Under flushMu and mu, with buf empty or holding only records newer than
// the state it writes (they go to the new file with the next flush).
func (j *journal) rewriteLocked() error {
	var b []byte
	for _, g := range slices.Sorted(maps.Keys(j.groups)) { // the same bytes for the same state
		s := j.groups[g]
		if s.hv.ok {
			var p [32]byte
			b = appendRecord(b, jHardState, g, hsPayload(&p, s.hv.proto(), s.applied))
		}
		if s.cs != nil {
			p, err := csPayload(s.cs, s.csIndex)
			if err != nil {
				return err
			}
			b = appendRecord(b, jConfState, g, p)
		}
		b = appendRecord(b, jAnchor, g, anchorPayload(s.anc, !s.ancPending))
		for _, e := range s.side {
			b = appendRecord(b, jEntry, g, entryPayload(e))
		}
		if s.trusted {
			b = appendRecord(b, jTrusted, g, nil)
		}
		if s.rejoin {
			b = appendRecord(b, jRejoin, g, nil)
		}
	}
	tmp := j.path + ".tmp"
	f, err := j.fs.OpenFile(tmp, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = j.fs.Rename(tmp, j.path)
	}
	if err == nil {
		err = j.fs.SyncDir(filepath.Dir(j.path))
	}
	if err != nil {
		f.Close()
		return err
	}
	j.fileMu.Lock() // a putAnchorSynced's fsync of the old file ends first
	j.f.Close()
	j.f, j.size, j.checkAt = f, int64(len(b)), 0
	j.fileMu.Unlock()
	return nil
}

func (j *journal) close() error {
	j.mu.Lock()
	closed := j.f == nil
	j.mu.Unlock()
	if closed {
		return nil
	}
	ferr := j.flush(true)
	j.flushMu.Lock()
	defer j.flushMu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return ferr
	}
	j.fileMu.Lock()
	err := j.f.Close()
	j.f = nil
	j.fileMu.Unlock()
	return errors.Join(ferr, err)
}
