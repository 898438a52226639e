package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"holdfast/internal/invariant"
	"holdfast/internal/records"
)

// Errors returned by Log.
var (
	ErrOffsetOutOfRange = errors.New("storage: offset out of range")
	ErrNotBoundary      = errors.New("storage: offset is not a batch boundary")
	ErrClosed           = errors.New("storage: log closed")
	// ErrStaleEpoch: an append carries a leader epoch below the log's latest.
	ErrStaleEpoch = errors.New("storage: leader epoch older than the log's latest")
	// ErrFailed wraps the sticky error of a log whose fsync failed.
	ErrFailed = errors.New("storage: log failed")
)

const (
	epochCheckpoint   = "leader-epoch-checkpoint"
	startCheckpoint   = "log-start-offset-checkpoint"
	ordinalCheckpoint = "segment-ordinal-checkpoint"
	// MetadataFile names the topic a log directory belongs to (Kafka's
	// partition.metadata). The partition layer owns it; a log only
	// tolerates it.
	MetadataFile    = "partition.metadata"
	maxOrdinalCkpt  = 64 << 20 // bytes; ~1.5 M segments
	maxEpochEntries = 1 << 16  // bounds the checkpoint file and the cache
	// maxIndexRecoveryTries bounds the index entries recovery checks
	// before it rescans the active segment from its start.
	maxIndexRecoveryTries = 8
	// recoverMaxBatch bounds a batch read during recovery, whatever
	// max.message.bytes was when it was written.
	recoverMaxBatch = maxMaxMessageBytes + records.HeaderSize
)

// Options are a log's collaborators; zero values get defaults.
type Options struct {
	FS     FS           // default OSFS()
	Syncer *Syncer      // default: one shared process-wide Syncer
	Logger *slog.Logger // default slog.Default()
	Now    func() time.Time
	// CleanShutdown: the log was last closed by a clean shutdown (every
	// log closed and fsynced, then a marker written; see
	// replica.Manager.Close) and nothing wrote to it since, so what
	// recovery keeps is on disk already and Open does not fsync it again.
	// Recovery still checks the tail and cuts (and fsyncs) a torn one.
	CleanShutdown bool
	// OnCorrupt is called once for each corruption a log finds (at open,
	// on a read, by the scrubber): the owner's count of them.
	OnCorrupt func()
	// NoReadChecks hands bytes out without checking them first (Kafka's
	// behaviour: only the client's CRC check sees corruption, and a
	// corrupt replica keeps serving it). Off by default (verify.go).
	NoReadChecks bool
	// ReadCache is the node's read cache of direct-I/O writes
	// (readcache.go); nil: one shared by every log opened without one.
	ReadCache *ReadCache
	// NewDir: the caller has just made dir, empty (no file of the log in
	// it): Open does not list it, and it leaves the new segment's name
	// unsynced - the caller makes the directory durable before anything
	// is appended (the partition manager settles many new partitions
	// with one syncfs).
	NewDir bool
}

// AppendInfo describes an appended batch.
type AppendInfo struct {
	BaseOffset, LastOffset int64
	MaxTimestamp           int64
	Size                   int
	Ordinal                int64 // the batch's ordinal (see EndOrdinal)
}

type epochEntry struct {
	epoch int32
	start int64
}

// Log is one partition's segmented log. All methods are safe for concurrent
// use; appends are serialized.
type Log struct {
	// lastFetch: when a fetch last asked the read cache (unix ns), shared
	// with the segment files (readcache.go).
	lastFetch atomic.Int64

	dir    string
	fs     FS
	syncer *Syncer
	logger *slog.Logger // Options.Logger; dirLogger adds the directory
	now    func() time.Time

	maxMessage atomic.Int64 // copy of cfg.MaxMessageBytes for lock-free validation
	durable    atomic.Int64 // every offset below it is fsynced

	mu sync.RWMutex
	// cfg: shared by every log with the same configuration (internConfig:
	// ~0.1 KiB per partition held once per topic, issue 27); never
	// changed in place, SetConfig swaps it.
	cfg       *Config
	segs      []*segment // ascending base; the last one is active
	start     int64
	end       int64
	epochs    []epochEntry
	failed    error  // sticky: set when an fsync failed
	truncGen  uint64 // bumped by Truncate: a sync cycle begun before it claims nothing
	unflushed int64  // records appended since flush.messages last asked for an fsync

	// Deferred durability (sealAsync, writeEpochsAsync): appends, and so
	// the Raft Ready loop and the leader's proposers, never wait for an
	// fsync under mu. A roll leaves the old segment in pendingSeal; an
	// append that opens a leader epoch marks the epoch checkpoint dirty.
	// The next sync cycle makes both durable, off mu, before it advances
	// the durable offset past them, so nothing is acknowledged whose
	// covering state could be lost. ordGen and epochGen count changes of
	// the ordinal checkpoint and the epoch cache, so that a cycle's write
	// never replaces a newer one.
	pendingSeal *segment
	epochGen    uint64
	ordGen      uint64
	sealMu      sync.Mutex   // serializes the cycles' seal and checkpoint writes; taken before mu, never under it
	scanned     []epochEntry // recovery only: the epochs of the batches it scanned, in order

	// startMu serializes the moves of the log start (DeleteBefore) and the
	// resets, which write the start checkpoint and remove segment files:
	// DeleteBefore does its file work (the checkpoint's fsyncs, the
	// unlinks, the directory's fsync) off mu, so that appends never wait
	// for it, and a reset must not create a segment file that such a
	// removal would take. Taken before mu, never under it.
	startMu sync.Mutex

	// Compaction (cleaner.go): the cleaner checkpoint (first dirty offset,
	// persisted in cleaner-offset-checkpoint), the earliest delete horizon
	// a pass left for later (0: none), and whether a pass runs.
	firstDirty     int64
	nextHorizon    int64
	blockedRemoval int64 // see pass.blocked; -1 none

	waitMu sync.Mutex
	lruMu  sync.Mutex // guards lru and lruEntries; taken after a segment's idxMu
	// (atomic.Bools are 4 bytes: beside the mutexes they fill no padding.)
	cleaning   atomic.Bool // a compaction pass runs
	timerArmed atomic.Bool // interval policy: a sync is scheduled
	// waitCh is closed when durable/failed changes; made when a
	// WaitDurable first asks for it (most logs have no waiter between two
	// advances: a channel per log and per advance otherwise, issue 27).
	waitCh chan struct{}

	lru        []*segment // sealed segments with loaded indexes, least recently used first
	lruEntries int        // index entries they hold
	dev        uint64     // device of the files, for syncfs grouping (0: none)

	// openEnd and openActive: the end and the active segment recovery
	// left. A log opened clean that still has them (and no truncation
	// since) holds what the last clean stop fsynced: Close does not fsync
	// it again.
	openEnd    int64
	openActive *segment

	onCorrupt  func()     // Options.OnCorrupt
	corruptErr error      // sticky: the first corruption found (verify.go)
	rc         *ReadCache // Options.ReadCache

	// The node's data journal (Options.Syncer's, datajournal.go) and the
	// log's directory relative to its root ("": not journaled).
	journal *DataJournal
	jrel    string

	// The flags, together (each alone took a word of padding: the struct
	// is per partition, issue 27).
	closed      bool // under mu
	epochsDirty bool // under mu
	clean       bool // opened after a clean shutdown (Options.CleanShutdown)
	noChecks    bool // Options.NoReadChecks
	newDir      bool // Options.NewDir
	created     bool // Open created the first segment (a new log)
	jflushed    bool // Close wrote out and fsynced everything (under mu)
	// noEpochFile (mu): a new log that has written no epoch checkpoint
	// yet: a group cycle writes its first one in place (syncPrepareGroup).
	noEpochFile bool
}

// dirLogger is the log's logger with its directory attached. Made per
// message (a log writes few, all on rare paths) rather than held: a
// logger with an attribute preformatted was ~0.45 KiB per partition
// (issue 27).
func (l *Log) dirLogger() *slog.Logger { return l.logger.With("dir", l.dir) }

// Open opens (creating if missing) the log in dir and recovers it: the
// active segment is scanned from its last index entry, every batch's CRC
// checked, and a torn tail truncated (a bad batch followed by good ones
// fails the open with ErrCorrupt).
func Open(dir string, cfg Config, opts Options) (*Log, error) {
	if opts.FS == nil {
		opts.FS = OSFS()
	}
	if opts.Syncer == nil {
		opts.Syncer = defaultSyncer()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ReadCache == nil {
		opts.ReadCache = defaultReadCache
	}
	l := &Log{
		dir:       filepath.Clean(dir),
		fs:        opts.FS,
		syncer:    opts.Syncer,
		logger:    opts.Logger,
		now:       opts.Now,
		cfg:       internConfig(cfg.normalize()),
		clean:     opts.CleanShutdown,
		onCorrupt: opts.OnCorrupt,
		noChecks:  opts.NoReadChecks,
		rc:        opts.ReadCache,
		newDir:    opts.NewDir,

		blockedRemoval: -1,
	}
	l.maxMessage.Store(int64(l.cfg.MaxMessageBytes))
	if j := opts.Syncer.journal; j != nil {
		l.journal, l.jrel = j, j.rel(l.dir)
	}
	if err := l.recover(); err != nil {
		for _, s := range l.segs {
			s.closeFiles()
		}
		return nil, err
	}
	return l, nil
}

func (l *Log) cfgIndexInterval() int { return l.cfg.IndexIntervalBytes }

// recover opens the log's directory as a crash left it, in steps: the
// directory listed (an interrupted compaction swap finished), its files
// sorted out, checkpoints of a newer format refused before anything
// changes, orphan indexes removed, the checkpoints read, the segments
// opened and the active one's torn tail cut, the start and end settled,
// the leader epochs recovered, and what was kept made durable.
func (l *Log) recover() error {
	names, err := l.listDir()
	if err != nil {
		return err
	}
	f, err := l.classifyFiles(names)
	if err != nil {
		return err
	}
	if err := l.checkCheckpointVersions(names); err != nil {
		return err
	}
	if err := l.removeOrphanIndexes(f); err != nil {
		return err
	}
	ords, err := l.readCheckpoints(f)
	if err != nil {
		return err
	}
	if err := l.openSegments(&f, ords); err != nil {
		return err
	}
	if err := l.recoverSegments(ords, f.ords); err != nil {
		return err
	}
	if err := l.settleStartEnd(); err != nil {
		return err
	}
	if err := l.recoverEpochs(f.epochs); err != nil {
		return err
	}
	return l.settleRecovered()
}

// dirFiles is what recover found in the log's directory.
type dirFiles struct {
	logs                         map[int64]bool // segment bases
	indexes                      []string       // index file names
	epochs, start, ords, cleaner bool           // the checkpoints present
}

// listDir lists the log's directory, making it if missing, and finishes
// an interrupted compaction swap first.
func (l *Log) listDir() ([]string, error) {
	if l.newDir {
		return nil, nil // made empty just now by the caller (Options.NewDir)
	}
	names, err := l.fs.ReadDir(l.dir)
	if errors.Is(err, os.ErrNotExist) {
		// A new log: its directory's name must survive a power cut as
		// its files do (the partition manager made and fsynced it
		// already; a log opened on its own makes it here).
		if err = MkdirAllDurable(l.fs, l.dir); err == nil {
			names, err = l.fs.ReadDir(l.dir)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", l.dir, err)
	}
	if changed, err := l.recoverSwaps(names); err != nil {
		return nil, err
	} else if changed {
		if names, err = l.fs.ReadDir(l.dir); err != nil {
			return nil, fmt.Errorf("storage: open %s: %w", l.dir, err)
		}
	}
	return names, nil
}

// classifyFiles sorts the directory's files into segments, indexes and
// checkpoints, removes leftovers of interrupted atomic writes, and refuses
// anything else.
func (l *Log) classifyFiles(names []string) (dirFiles, error) {
	f := dirFiles{logs: map[int64]bool{}}
	for _, name := range names {
		base, suf, ok := parseSegmentName(name)
		switch {
		case ok && suf == logSuffix:
			f.logs[base] = true
		case ok:
			f.indexes = append(f.indexes, name)
		case name == epochCheckpoint:
			f.epochs = true
		case name == startCheckpoint:
			f.start = true
		case name == ordinalCheckpoint:
			f.ords = true
		case name == cleanerCheckpoint:
			f.cleaner = true
		case name == MetadataFile:
		case strings.HasSuffix(name, ".tmp"):
			// An interrupted atomic write: the old file is still intact.
			if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return f, fmt.Errorf("storage: open %s: remove leftover %s: %w", l.dir, name, err)
			}
		default:
			return f, fmt.Errorf("storage: open %s: unexpected file %q (not a segment, index or checkpoint of a log)", l.dir, name)
		}
	}
	return f, nil
}

// checkCheckpointVersions refuses a checkpoint of a newer format.
func (l *Log) checkCheckpointVersions(names []string) error {
	// Before recovery changes anything: a checkpoint of a newer format is
	// not damage (which would discard the log, rebuild or rewrite the
	// file): the open fails and every file stays as it is.
	for _, c := range checkpointVersions {
		if !slices.Contains(names, c.name) {
			continue
		}
		path := filepath.Join(l.dir, c.name)
		b, err := readHead(l.fs, path, 32)
		if err != nil {
			return fmt.Errorf("storage: open %s: read %s: %w", l.dir, c.name, err)
		}
		if err := checkVersionLine(path, b, c.known...); err != nil {
			l.dirLogger().Error("storage: a checkpoint of a newer format: refusing to open the log", "err", err)
			return fmt.Errorf("storage: open %s: %w", l.dir, err)
		}
	}
	return nil
}

// removeOrphanIndexes removes index files whose segment is gone.
func (l *Log) removeOrphanIndexes(f dirFiles) error {
	for _, name := range f.indexes {
		if base, _, _ := parseSegmentName(name); !f.logs[base] {
			// Left behind by a segment deletion that crashed halfway.
			l.dirLogger().Warn("storage: removing orphan index", "file", name)
			if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
				return fmt.Errorf("storage: open %s: remove orphan %s: %w", l.dir, name, err)
			}
		}
	}
	return nil
}

// readCheckpoints reads the start, cleaner and ordinal checkpoints; it
// returns the ordinals by segment base.
func (l *Log) readCheckpoints(f dirFiles) (map[int64]int64, error) {
	if f.start {
		b, err := ReadFile(l.fs, filepath.Join(l.dir, startCheckpoint), 64)
		if err != nil {
			return nil, fmt.Errorf("storage: open %s: read %s: %w", l.dir, startCheckpoint, err)
		}
		v, err := parseStartCheckpoint(b)
		if err != nil {
			return nil, l.damagedAtOpen(startCheckpoint, err)
		}
		l.start = v
	}
	if f.cleaner {
		// Only a hint: a missing or damaged one means the next pass
		// cleans from the start again.
		b, err := ReadFile(l.fs, filepath.Join(l.dir, cleanerCheckpoint), 128)
		if err == nil {
			err = l.parseCleanerCheckpoint(b)
		}
		if err != nil {
			l.dirLogger().Warn("storage: ignoring damaged cleaner checkpoint", "err", err)
			l.firstDirty, l.nextHorizon, l.blockedRemoval = 0, 0, -1
		}
	}
	ords := map[int64]int64{}
	if f.ords {
		b, err := ReadFile(l.fs, filepath.Join(l.dir, ordinalCheckpoint), maxOrdinalCkpt)
		if err != nil {
			return nil, fmt.Errorf("storage: open %s: read %s: %w", l.dir, ordinalCheckpoint, err)
		}
		if ords, err = parseOrdinalCheckpoint(b); err != nil {
			return nil, l.damagedAtOpen(ordinalCheckpoint, err)
		}
	}
	return ords, nil
}

// openSegments opens every segment file in offset order, checking each
// sealed one's first batch and dropping empty sealed ones.
func (l *Log) openSegments(f *dirFiles, ords map[int64]int64) error {
	bases := make([]int64, 0, len(f.logs))
	for b := range f.logs {
		bases = append(bases, b)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	if !f.ords && len(bases) > 0 {
		// A new log writes no checkpoint until its first roll (below):
		// its first segment is at ordinal 0, as a checkpoint would list
		// it. Read so, a crash in its first roll (a second segment, no
		// checkpoint yet) recovers as after any roll the checkpoint does
		// not list (recoverUnsealed).
		ords[bases[0]] = 0
		f.ords = true
	}
	for i, base := range bases {
		s, err := l.openSegment(base, false)
		if err != nil {
			return err
		}
		last := i == len(bases)-1
		if !last {
			if _, nextListed := ords[bases[i+1]]; s.size == 0 && f.ords && !nextListed && i+1 == len(bases)-1 {
				// The segment before an unlisted last one may never have
				// been sealed: empty, it lost its batches, and what was
				// rolled after it lies beyond a hole (recoverUnsealed).
				l.segs = append(l.segs, s)
				continue
			}
			if s.size == 0 {
				// Nothing to lose; an empty sealed segment only confuses lookups.
				l.dirLogger().Warn("storage: removing empty sealed segment", "file", s.f.Name())
				s.closeFiles()
				if err := l.removeSegmentFiles(s); err != nil {
					return err
				}
				continue
			}
			h, err := readHeader(s.f, 0)
			if err == nil && h.Magic > 2 && h.BaseOffset == base {
				// A whole batch of a newer magic, its checksum valid: not
				// damage (which discards the replica).
				if _, cerr := l.checkBatchAt(s, 0, base); errors.Is(cerr, ErrUnknownFormat) {
					l.segs = append(l.segs, s)
					return fmt.Errorf("storage: open %s: %w", l.dir, cerr)
				}
			}
			if err == nil && (h.Magic != 2 || h.BaseOffset != base) {
				err = fmt.Errorf("first batch has magic %d offset %d: %w", h.Magic, h.BaseOffset, records.ErrCorrupt)
			}
			if err != nil {
				l.segs = append(l.segs, s)
				if errors.Is(err, records.ErrCorrupt) || errors.Is(err, records.ErrTruncated) {
					return l.damagedAtOpen(s.f.Name(), err)
				}
				return fmt.Errorf("storage: open %s: damaged segment %s: %w", l.dir, s.f.Name(), err)
			}
			if n := len(l.segs); n > 0 {
				l.segs[n-1].next = base
			}
		}
		l.segs = append(l.segs, s)
	}
	return nil
}

// recoverSegments creates the first segment of a new log, or links the
// opened ones, recovers an unsealed one, gives each its first ordinal and
// cuts the active segment's torn tail.
func (l *Log) recoverSegments(ords map[int64]int64, haveOrds bool) error {
	if len(l.segs) == 0 {
		// A new log: its segment, and one fsync of the directory for
		// its name (and the partition.metadata the partition layer
		// wrote before). No ordinal checkpoint: a log whose only
		// segment is listed nowhere takes it at ordinal 0 (below), which
		// a new log's first segment is until its first roll writes the
		// checkpoint. Writing one here (a file created, fdatasynced and
		// renamed) was a fifth of the CPU of creating a partition.
		s, err := l.createSegment(l.start, false)
		if err != nil {
			return err
		}
		l.segs = append(l.segs, s) // firstOrd 0
		l.created = true
		l.noEpochFile = true
		if l.newDir {
			// The caller makes the directory durable, the segment's
			// name with it, before anything is appended.
			return nil
		}
		if err := l.fs.SyncDir(l.dir); err != nil {
			return fmt.Errorf("storage: open %s: %w", l.dir, err)
		}
	} else {
		n := len(l.segs)
		if n > 1 {
			l.segs[n-2].next = l.segs[n-1].base
		}
		if _, listed := ords[l.segs[n-1].base]; n > 1 && haveOrds && !listed {
			// Rolled after the last checkpoint: the segment before it may
			// not have been sealed (fsynced) when the power went, so it is
			// recovered like an active one; if its tail was torn, what
			// follows it was never durable and goes.
			if err := l.recoverUnsealed(); err != nil {
				return err
			}
			n = len(l.segs)
		}
		rewrite := len(ords) != n
		for i, s := range l.segs {
			o, ok := ords[s.base]
			switch {
			case ok:
				s.firstOrd = o
			case i == 0:
				// Only a log from before ordinals, or a lost checkpoint.
				l.dirLogger().Warn("storage: no ordinal for the first segment, assuming 0", "file", s.f.Name())
				rewrite = true
			default:
				// A segment created after the checkpoint was written can
				// only be the last: count the batches of the one before.
				c, err := l.segmentBatches(l.segs[i-1])
				if err != nil {
					return err
				}
				s.firstOrd = l.segs[i-1].firstOrd + c
				rewrite = true
			}
		}
		if err := l.recoverActive(l.segs[n-1]); err != nil {
			return err
		}
		if rewrite {
			if err := l.writeOrdinalsLocked(-1, 0); err != nil {
				return fmt.Errorf("storage: open %s: %w", l.dir, err)
			}
		}
	}
	return nil
}

// settleStartEnd sets the end from the active segment and keeps the start
// within the segments (a start past the recovered end resets the log
// there).
func (l *Log) settleStartEnd() error {
	act := l.active()
	l.end = act.next
	if l.start < l.segs[0].base {
		l.start = l.segs[0].base
	}
	if l.start > l.end {
		// DeleteBefore moved the start past data lost in the crash; the
		// offsets below start are gone by request, so restart there.
		l.dirLogger().Warn("storage: log start beyond recovered end, resetting", "start", l.start, "end", l.end)
		return l.resetLocked(l.start, act.firstOrd+act.nbatches)
	}
	return nil
}

// recoverEpochs reads the leader epoch checkpoint (rebuilt from the
// batches if missing or damaged) and adds the epochs of the batches
// recovery scanned.
func (l *Log) recoverEpochs(haveEpochs bool) error {
	if haveEpochs {
		// A checkpoint that cannot be read (EMFILE, EIO) fails the open:
		// only damaged content is rebuilt from the batches, which lose
		// the epoch of start-1 once its segment is gone, and the rebuilt
		// file would replace the good one for good.
		b, err := ReadFile(l.fs, filepath.Join(l.dir, epochCheckpoint), 64+int64(maxEpochEntries)*32)
		if err != nil && !errors.Is(err, errFileTooLarge) {
			return fmt.Errorf("storage: open %s: read %s: %w", l.dir, epochCheckpoint, err)
		}
		if err == nil {
			l.epochs, err = parseEpochCheckpoint(b)
		}
		if err != nil {
			l.dirLogger().Warn("storage: damaged leader epoch checkpoint, rebuilding", "file", epochCheckpoint, "err", err)
			haveEpochs = false
		}
	}
	if !haveEpochs && l.end > l.segs[0].base {
		if err := l.rebuildEpochs(); err != nil {
			return err
		}
	}
	l.truncateEpochsLocked(l.end)
	// The epochs of the batches recovery scanned (the tail the index did
	// not cover): the checkpoint is written after the batches that open an
	// epoch (by the sync cycle that makes them durable), so it may lack one.
	before := len(l.epochs)
	for _, e := range l.scanned {
		if e.start < l.end {
			l.noteEpochLocked(e.epoch, e.start)
		}
	}
	l.scanned = nil
	if len(l.epochs) != before {
		if err := l.writeEpochsLocked(); err != nil {
			return err
		}
	}
	return nil
}

// settleRecovered makes what recovery kept durable and the active
// segment's index current.
func (l *Log) settleRecovered() error {
	act := l.active()
	// What recovery kept is durable from here on; fsync it in case it was
	// only in the page cache (a process crash, not a power loss). After a
	// clean shutdown the last Close fsynced it. A segment this open
	// created is empty: nothing of it to fsync (its name is the
	// directory's fsync).
	if !l.clean && !l.created {
		if err := act.f.Sync(); err != nil {
			return fmt.Errorf("storage: open %s: sync %s: %w", l.dir, act.f.Name(), err)
		}
	}
	act.idxMu.Lock()
	if act.idxExists {
		if err := act.persistLocked(l, act.size, false); err != nil {
			l.dirLogger().Warn("storage: index write failed", "file", act.path(indexSuffix), "err", err)
		}
	} else if act.indexDueLocked(act.size) {
		// Recovery scanned a tail long enough to be worth an index; the
		// files are made off the open path, as during a run.
		l.queueIndexCreateLocked(act)
	}
	act.idxMu.Unlock()
	l.durable.Store(l.end)
	act.jpos = act.size // what recovery kept is durable (its name maybe not: named stays false)
	l.openEnd, l.openActive = l.end, act
	l.dev = fileDevice(act.f)
	return nil
}

func (l *Log) openSegment(base int64, create bool) (*segment, error) {
	s := &segment{dir: l.dir, base: base, next: base, firstTS: -1, maxTS: -1, maxTSOff: -1}
	flag := os.O_RDWR | os.O_APPEND
	if create {
		// Not O_EXCL: an empty file left by a roll whose directory sync
		// failed is reused (checked to be empty below).
		flag |= os.O_CREATE
	}
	f, err := l.fs.OpenFile(s.path(logSuffix), flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: open segment %s: %w", s.path(logSuffix), err)
	}
	s.f = f
	size, err := f.Size()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("storage: open segment %s: %w", s.path(logSuffix), err)
	}
	if size > maxSegmentBytes {
		f.Close()
		return nil, fmt.Errorf("storage: open segment %s: size %d exceeds %d", s.path(logSuffix), size, int64(maxSegmentBytes))
	}
	if create && size != 0 {
		f.Close()
		return nil, fmt.Errorf("storage: create segment %s: already exists with %d bytes", s.path(logSuffix), size)
	}
	s.size = size
	af := newAppendFile(f, size)
	af.onDirectOff = l.directUnavailable
	af.lastFetch = &l.lastFetch
	af.rc = l.rc
	af.writes = &l.syncer.writes
	s.f = af
	s.refs.Store(1)
	return s, nil
}

// directWarned: the first log that finds O_DIRECT refused says so as a
// warning, the others (every log on that filesystem) only at debug level.
var directWarned atomic.Bool

func (l *Log) directUnavailable(err error) {
	if directWarned.CompareAndSwap(false, true) {
		l.dirLogger().Warn("storage: log.direct.io: the filesystem refuses O_DIRECT, writing through the page cache", "err", err)
		return
	}
	l.dirLogger().Debug("storage: log.direct.io: O_DIRECT refused, writing through the page cache", "err", err)
}

// createSegment creates an empty segment and, with syncDir, makes its name
// durable (a roll leaves that to the sync cycle: sealAsync).
func (l *Log) createSegment(base int64, syncDir bool) (*segment, error) {
	s, err := l.openSegment(base, true)
	if err != nil {
		return nil, err
	}
	s.loaded = true
	if j := l.cfg.SegmentJitter; j > 0 {
		s.jitter = time.Duration(rand.Int64N(int64(j)))
	}
	if !syncDir {
		return s, nil
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("storage: create segment %s: sync dir: %w", s.path(logSuffix), err)
	}
	s.named = true
	return s, nil
}

// recoverActive validates the active segment from its last trustworthy
// index entry to the end and truncates whatever follows the last good batch.
func (l *Log) recoverActive(s *segment) error {
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	sizes, err := s.loadIndexesSizesLocked(l, true)
	if err != nil {
		return fmt.Errorf("storage: open %s: %w", l.dir, err)
	}
	// What the files hold: the scan below recomputes the entries from the
	// last trusted one on, and the files are cut only where they differ.
	// (Cut and rewritten every time, a restart after a clean stop cut,
	// rewrote and fsynced the index files of every log.)
	diskOff, diskTime := slices.Clone(s.offIdx), slices.Clone(s.timeIdx)
	// Trust the last entry whose batch checks out; drop the ones after it.
	// Only a torn tail of the index can be bad (invariant 2), so a few tries
	// suffice; past that, scanning the segment from 0 is linear, while
	// checking every entry of a garbage index could be quadratic.
	keep := len(s.offIdx)
	for tries := 0; keep > 0; tries++ {
		if tries == maxIndexRecoveryTries {
			keep = 0
			break
		}
		e := s.offIdx[keep-1]
		_, err := l.checkBatchAt(s, int64(e.pos), s.base+int64(e.rel))
		if err == nil {
			break
		}
		if errors.Is(err, records.ErrCorrupt) && !errors.Is(err, records.ErrTruncated) {
			// The entry passed its own CRC, and an entry is written only
			// once its batch was fsynced (invariant 2): the batch was
			// durable and is damaged now. Not a torn tail.
			return l.corruptAtOpen(s, int64(e.pos), err)
		}
		keep--
	}
	var pos, next, ord int64 = 0, s.base, 0
	if keep > 0 {
		// The scan below re-adds this entry.
		e := s.offIdx[keep-1]
		pos, next, ord = int64(e.pos), s.base+int64(e.rel), int64(e.ord)
	}
	s.truncateIndexMemLocked(next, ord)
	s.sinceIndex = l.cfg.IndexIntervalBytes // index the first scanned batch
	scanFrom, full := pos, false
	var reason error
	for pos < s.size {
		h, err := l.checkBatchAt(s, pos, -1)
		if errors.Is(err, ErrUnknownFormat) {
			// Not a torn tail: cutting it would drop what a newer
			// Holdfast wrote.
			return fmt.Errorf("storage: open %s: %w", l.dir, err)
		}
		if err == nil && h.BaseOffset < next {
			err = fmt.Errorf("batch at %d has offset %d, expected >= %d: %w", pos, h.BaseOffset, next, records.ErrCorrupt)
		}
		if err == nil && (h.LastOffset()-s.base > math.MaxUint32 || len(s.offIdx) >= maxIndexEntries) {
			err = fmt.Errorf("batch at %d does not fit the segment's index", pos)
			full = true
		}
		if err != nil {
			reason = err
			break
		}
		s.indexBatchLocked(l.cfg.IndexIntervalBytes, h, pos)
		if h.PartitionLeaderEpoch >= 0 {
			if k := len(l.scanned); k == 0 || h.PartitionLeaderEpoch > l.scanned[k-1].epoch {
				l.scanned = append(l.scanned, epochEntry{h.PartitionLeaderEpoch, h.BaseOffset})
			}
		}
		pos += int64(h.Size())
		next = h.LastOffset() + 1
	}
	if pos > 0 {
		s.firstTS = l.now().UnixMilli()
	}
	s.offPersisted = commonPrefix(diskOff, s.offIdx, func(a, b offEntry) bool { return a == b })
	s.timePersisted = commonPrefix(diskTime, s.timeIdx, func(a, b timeEntry) bool { return a.ts == b.ts && a.rel == b.rel })
	if err := s.cutIndexFilesLocked(l, &sizes); err != nil {
		return fmt.Errorf("storage: open %s: truncate index: %w", l.dir, err)
	}
	if reason != nil {
		// A torn tail is only the last, partial batch: a good batch after
		// the bad one means bytes in the middle changed (verify.go).
		if at, ok := l.goodBatchAfter(s, pos, next); ok && !full {
			return l.corruptAtOpen(s, pos, fmt.Errorf("%w, and a good batch follows at byte %d", reason, at))
		}
		l.dirLogger().Warn("storage: truncating torn tail", "file", s.f.Name(), "position", pos, "size", s.size, "reason", reason)
		if err := s.f.Truncate(pos); err != nil {
			return fmt.Errorf("storage: open %s: truncate %s at %d: %w", l.dir, s.f.Name(), pos, err)
		}
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("storage: open %s: sync %s: %w", l.dir, s.f.Name(), err)
		}
		s.size = pos
	}
	s.ver.add(scanFrom, pos)
	s.next = next
	s.loaded = true
	return nil
}

// commonPrefix returns how many leading elements a and b share.
func commonPrefix[E any](a, b []E, eq func(E, E) bool) int {
	n := 0
	for n < len(a) && n < len(b) && eq(a[n], b[n]) {
		n++
	}
	return n
}

// recoverUnsealed handles a last segment the ordinal checkpoint does not
// list: the roll that created it had not finished sealing the segment
// before it (sealAsync) when the process stopped. That one is recovered
// like an active segment (checked from its last trustworthy index entry,
// a torn tail cut). If it lost its tail, the last segment lies beyond a
// hole: nothing in it was ever durable (the durable offset passes a rolled
// segment's end only once it is sealed), so it is removed. Otherwise the
// segment's indexes are written and fsynced: it is sealed now.
func (l *Log) recoverUnsealed() error {
	n := len(l.segs)
	prev, last := l.segs[n-2], l.segs[n-1]
	if err := l.recoverActive(prev); err != nil {
		return err
	}
	// A gap means a lost tail (the crash kept less than was written, or
	// recovery cut a torn batch). A cleaned segment could also end below
	// the next base, but one is never unlisted this way: the cleaner does
	// not touch a segment pending seal, and its own checkpoint lists the
	// segment after what it cleaned.
	if prev.next != last.base {
		l.dirLogger().Warn("storage: segment rolled from a torn one, removing it (never durable)", "file", last.f.Name(), "torn_end", prev.next)
		if err := l.removeSegmentFiles(last); err != nil {
			return fmt.Errorf("storage: open %s: %w", l.dir, err)
		}
		if err := l.fs.SyncDir(l.dir); err != nil {
			return fmt.Errorf("storage: open %s: %w", l.dir, err)
		}
		last.unref()
		l.segs = l.segs[:n-1]
		return nil
	}
	if err := prev.f.Sync(); err != nil {
		return fmt.Errorf("storage: open %s: sync %s: %w", l.dir, prev.f.Name(), err)
	}
	prev.idxMu.Lock()
	prev.finishTimeIndexLocked()
	prev.idxDirty = true // sealed now: its index files must be durable
	err := prev.persistLocked(l, prev.size, true)
	prev.idxMu.Unlock()
	if err != nil {
		return l.dropSealedIndex(prev, err)
	}
	return nil
}

// checkBatchAt reads and fully validates (CRC) the batch at pos; want >= 0
// also requires that base offset.
func (l *Log) checkBatchAt(s *segment, pos, want int64) (records.Header, error) {
	h, err := readHeader(s.f, pos)
	if err != nil {
		return h, err
	}
	if h.Length < records.HeaderSize-12 || int64(h.Size()) > s.size-pos || h.Size() > recoverMaxBatch {
		return h, fmt.Errorf("batch at %d: length %d runs past the file: %w", pos, h.Length, records.ErrTruncated)
	}
	b := make([]byte, h.Size())
	if n, err := s.f.ReadAt(b, pos); n < len(b) {
		return h, fmt.Errorf("batch at %d: read: %w", pos, err)
	}
	if _, err := records.Validate(b, 0); err != nil {
		if errors.Is(err, records.ErrUnsupportedMagic) && h.Magic > 2 && records.Checksum(b) == h.CRC {
			// Whole, and its checksum (magic 2's) holds: a batch of a
			// newer format, neither torn nor damaged.
			fe := &FormatError{Path: fmt.Sprintf("%s (batch at byte %d)", s.f.Name(), pos), What: "record batch magic",
				Found: strconv.Itoa(int(h.Magic)), Known: []int{2}}
			return h, fmt.Errorf("batch at %d: %w (%w)", pos, fe, err)
		}
		return h, fmt.Errorf("batch at %d: %w", pos, err)
	}
	if want >= 0 && h.BaseOffset != want {
		return h, fmt.Errorf("batch at %d: offset %d, index says %d: %w", pos, h.BaseOffset, want, records.ErrCorrupt)
	}
	return h, nil
}

func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

// checkWritableLocked is the precondition of every mutation.
func (l *Log) checkWritableLocked() error {
	if l.closed {
		return ErrClosed
	}
	if l.failed != nil {
		return fmt.Errorf("%w: %s: %w", ErrFailed, l.dir, l.failed)
	}
	return nil
}

// Append validates batch (framing, size, CRC), assigns it the next offsets,
// stamps leaderEpoch, and writes it to the active segment. It rewrites
// baseOffset and partitionLeaderEpoch of batch in place. It does not wait
// for fsync: call WaitDurable with info.LastOffset+1 for that.
func (l *Log) Append(batch []byte, leaderEpoch int32) (AppendInfo, error) {
	h, err := records.Validate(batch, int(l.maxMessage.Load()))
	if err != nil {
		return AppendInfo{}, fmt.Errorf("storage: append to %s: %w", l.dir, err)
	}
	if h.NumRecords == 0 {
		// Only compaction makes empty batches; from a producer it would
		// consume offsets for nothing.
		return AppendInfo{}, fmt.Errorf("storage: append to %s: batch without records: %w", l.dir, records.ErrCorrupt)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkWritableLocked(); err != nil {
		return AppendInfo{}, err
	}
	records.SetBaseOffset(batch, l.end)
	records.SetLeaderEpoch(batch, leaderEpoch)
	h.BaseOffset, h.PartitionLeaderEpoch = l.end, leaderEpoch
	return l.appendLocked(batch, h)
}

// AppendReplicated appends a batch as the leader wrote it: its baseOffset
// must equal EndOffset() and its epoch is kept.
func (l *Log) AppendReplicated(batch []byte) (AppendInfo, error) {
	h, err := records.Validate(batch, int(l.maxMessage.Load()))
	if err != nil {
		return AppendInfo{}, fmt.Errorf("storage: append to %s: %w", l.dir, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkWritableLocked(); err != nil {
		return AppendInfo{}, err
	}
	if h.BaseOffset != l.end {
		return AppendInfo{}, fmt.Errorf("storage: append replicated to %s: batch offset %d, log end %d: %w", l.dir, h.BaseOffset, l.end, ErrOffsetOutOfRange)
	}
	return l.appendLocked(batch, h)
}

// AppendValidated is AppendReplicated for a batch the caller checked
// (records.Check) and stamped: the leader's own batches, validated once by
// the produce path, are not parsed or checksummed again here.
func (l *Log) AppendValidated(v records.Validated) (AppendInfo, error) {
	h := v.Header()
	if len(v.Bytes()) < records.HeaderSize || h.Size() != len(v.Bytes()) {
		return AppendInfo{}, fmt.Errorf("storage: append to %s: not a checked batch: %w", l.dir, records.ErrCorrupt)
	}
	if max := l.maxMessage.Load(); max > 0 && int64(h.Size()) > max {
		return AppendInfo{}, fmt.Errorf("storage: append to %s: batch of %d bytes exceeds %d: %w", l.dir, h.Size(), max, records.ErrTooLarge)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkWritableLocked(); err != nil {
		return AppendInfo{}, err
	}
	if h.BaseOffset != l.end {
		return AppendInfo{}, fmt.Errorf("storage: append to %s: batch offset %d, log end %d: %w", l.dir, h.BaseOffset, l.end, ErrOffsetOutOfRange)
	}
	return l.appendLocked(v.Bytes(), h)
}

func (l *Log) appendLocked(batch []byte, h records.Header) (AppendInfo, error) {
	if invariant.Enabled {
		// Offsets are dense and rising: every append path puts the batch
		// exactly at the end, and a batch covers at least one offset.
		invariant.Check(h.BaseOffset == l.end && h.LastOffset() >= h.BaseOffset,
			"storage: append to %s: batch [%d,%d] at log end %d", l.dir, h.BaseOffset, h.LastOffset(), l.end)
	}
	var newEpoch bool
	if h.PartitionLeaderEpoch >= 0 {
		if n := len(l.epochs); n > 0 && h.PartitionLeaderEpoch < l.epochs[n-1].epoch {
			return AppendInfo{}, fmt.Errorf("storage: append to %s: epoch %d < %d: %w", l.dir, h.PartitionLeaderEpoch, l.epochs[n-1].epoch, ErrStaleEpoch)
		}
		newEpoch = len(l.epochs) == 0 || h.PartitionLeaderEpoch > l.epochs[len(l.epochs)-1].epoch
	}
	s := l.active()
	if l.shouldRollLocked(s, h) {
		if err := l.rollLocked(h.BaseOffset); err != nil {
			return AppendInfo{}, err
		}
		s = l.active()
	}
	if newEpoch {
		if len(l.epochs) >= maxEpochEntries {
			return AppendInfo{}, fmt.Errorf("storage: append to %s: more than %d leader epochs", l.dir, maxEpochEntries)
		}
		// The checkpoint is written by the sync cycle that makes this
		// batch durable, before the durable offset passes it
		// (writeEpochsAsync): never under mu. Recovery notes the epochs of
		// the batches it scans, so a batch that reached the disk without
		// its checkpoint still brings its epoch back.
		l.epochs = append(l.epochs, epochEntry{h.PartitionLeaderEpoch, h.BaseOffset})
		l.epochsDirty = true
		l.epochGen++
	}
	pos := s.size
	n, err := s.f.Write(batch)
	if err != nil || n != len(batch) {
		if err == nil {
			err = fmt.Errorf("short write of %d/%d bytes", n, len(batch))
		}
		// A new epoch entry stays, in memory as in the checkpoint: an epoch
		// starting at the end offset is consistent, and keeping it means a
		// later append with an older epoch is refused as stale.
		if n > 0 {
			// Cut the partial batch so the file stays a sequence of whole batches.
			if terr := s.f.Truncate(pos); terr != nil {
				l.failLocked(fmt.Errorf("truncate after failed write of %s: %w", s.f.Name(), terr))
			}
		}
		return AppendInfo{}, fmt.Errorf("storage: append to %s: write %s: %w", l.dir, s.f.Name(), err)
	}
	s.idxMu.Lock()
	ord := s.firstOrd + s.nbatches
	s.indexBatchLocked(l.cfg.IndexIntervalBytes, h, pos)
	s.idxMu.Unlock()
	s.ver.add(pos, pos+int64(n)) // every append path checked the batch

	if s.firstTS < 0 {
		s.firstTS = l.now().UnixMilli()
	}
	s.size += int64(n)
	l.end = h.LastOffset() + 1
	s.next = l.end
	if n := l.cfg.FlushMessages; n > 1 && l.cfg.Flush.Mode != FlushSync {
		// flush.messages: start an fsync every n records (nobody waits).
		if l.unflushed += int64(h.NumRecords); l.unflushed >= n {
			l.unflushed = 0
			// Not under l.mu: a closed Syncer syncs inline.
			go l.syncer.request(l)
		}
	}
	if l.cfg.Flush.Mode == FlushInterval && l.timerArmed.CompareAndSwap(false, true) {
		time.AfterFunc(l.cfg.Flush.Interval, func() {
			l.timerArmed.Store(false)
			l.syncer.request(l)
		})
	}
	return AppendInfo{BaseOffset: h.BaseOffset, LastOffset: h.LastOffset(), MaxTimestamp: h.MaxTimestamp, Size: n, Ordinal: ord}, nil
}

func (l *Log) shouldRollLocked(s *segment, h records.Header) bool {
	if s.size == 0 {
		return false
	}
	if s.size+int64(h.Size()) > l.cfg.SegmentBytes {
		return true
	}
	if h.LastOffset()-s.base > math.MaxUint32 {
		return true
	}
	s.idxMu.Lock()
	full := len(s.offIdx) >= l.cfg.IndexMaxEntries || len(s.timeIdx) >= maxIndexEntries
	s.idxMu.Unlock()
	if full {
		return true
	}
	// segment.ms counts from the wall-clock time of the segment's first
	// append in this process, not from a client timestamp (which may be
	// years old and would roll every batch).
	return s.firstTS >= 0 && l.now().UnixMilli()-s.firstTS >= l.cfg.rollMs(s.jitter)
}

// rollLocked starts a new active segment at base. It fsyncs nothing: the
// old segment becomes pendingSeal, and the next sync cycle fsyncs its data
// and indexes and the directory (the new segment's name) before the
// durable offset moves past the old segment's end (sealAsync), off mu.
// Until the ordinal checkpoint lists the new segment, recovery treats the
// old one as possibly unsealed (recoverUnsealed).
func (l *Log) rollLocked(base int64) error {
	if l.pendingSeal != nil {
		// A whole segment filled within one sync cycle (tiny segments):
		// seal the previous one here, so that at most one is pending.
		if err := l.sealPendingLocked(); err != nil {
			return fmt.Errorf("storage: roll %s: %w", l.dir, err)
		}
	}
	old := l.active()
	old.idxMu.Lock()
	old.finishTimeIndexLocked()
	ord := old.firstOrd + old.nbatches
	old.idxMu.Unlock()
	s, err := l.createSegment(base, false)
	if err != nil {
		return fmt.Errorf("storage: roll %s: %w", l.dir, err)
	}
	s.firstOrd = ord
	old.next = base
	l.segs = append(l.segs, s)
	// No cycle is asked for here: under flush=sync the append's own wait
	// brings one at once; under the other policies the next cycle (their
	// interval or message count, an explicit Sync, Close) seals it, or the
	// next roll does. A background request would also act on a log that
	// was abandoned without Close (a simulated crash) while its directory
	// is opened again.
	l.pendingSeal = old
	return nil
}

// sealPendingLocked seals pendingSeal on the caller's goroutine, under mu:
// for the rare paths that need every sealed segment durable at once
// (Close, a second roll within one cycle).
func (l *Log) sealPendingLocked() error {
	old := l.pendingSeal
	if old == nil {
		return nil
	}
	if err := old.f.Sync(); err != nil {
		l.failLocked(fmt.Errorf("sync %s at roll: %w", old.f.Name(), err))
		return err
	}
	old.idxMu.Lock()
	err := old.persistLocked(l, old.size, true)
	old.idxMu.Unlock()
	if err != nil {
		if rerr := l.dropSealedIndex(old, err); rerr != nil {
			return rerr
		}
	}
	l.pendingSeal = nil
	return l.writeOrdinalsLocked(-1, 0) // its directory fsync covers the new segment's name
}

// dropSealedIndex handles a failed index write of a segment being sealed:
// a sealed segment must not keep a partial index, so its files go and the
// lazy load rebuilds them.
func (l *Log) dropSealedIndex(s *segment, err error) error {
	l.dirLogger().Warn("storage: index write at roll failed, removing it", "file", s.path(indexSuffix), "err", err)
	s.idxMu.Lock()
	s.idxExists = false
	s.idxMu.Unlock()
	var rerr error
	for _, suf := range []string{indexSuffix, timeIndexSuffix} {
		if e := l.fs.Remove(s.path(suf)); e != nil && !errors.Is(e, os.ErrNotExist) {
			rerr = errors.Join(rerr, e)
		}
	}
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	return nil
}

// syncPrepare makes durable, before a sync cycle's fsync of the active
// segment and off mu, what that cycle's end offset depends on besides the
// active segment's bytes: a rolled segment (sealAsync) and a new leader
// epoch (writeEpochsAsync). An error fails the log.
func (l *Log) syncPrepare(t syncTicket) error {
	if t.seal == nil && !t.epochs {
		return nil
	}
	l.sealMu.Lock()
	defer l.sealMu.Unlock()
	if t.seal != nil {
		if err := l.sealAsync(t.seal, t.gen); err != nil {
			return err
		}
	}
	if t.epochs {
		return l.writeEpochsAsync(t.gen)
	}
	return nil
}

// syncPrepareGroup is syncPrepare for a cycle whose syncfs covers the log
// (Syncer.syncGroup). A roll is sealed as there; a dirty epoch checkpoint
// is only written to its temp file, unsynced (t.epochsTmp, sealMu held):
// the group's syncfs makes it durable, epochsRename then puts it in place
// and a second syncfs makes the rename durable, all before the cycle
// advances any durable offset (invariant 5b). Two syncfs calls for the
// group, where each log's checkpoint cost an fdatasync and a directory
// fsync: the first write to each of thousands of new partitions opens an
// epoch.
func (l *Log) syncPrepareGroup(t *syncTicket) error {
	if t.seal == nil && !t.epochs {
		return nil
	}
	l.sealMu.Lock()
	if t.seal != nil {
		if err := l.sealAsync(t.seal, t.gen); err != nil {
			l.sealMu.Unlock()
			return err
		}
	}
	if t.epochs {
		l.mu.RLock()
		if !l.epochsDirty || l.truncGen != t.gen || l.closed {
			l.mu.RUnlock()
			l.sealMu.Unlock()
			return nil
		}
		if l.noEpochFile && len(l.epochs) == 1 {
			err := l.epochsInPlaceLocked(t)
			l.mu.RUnlock()
			if err != nil {
				l.sealMu.Unlock()
			}
			return err // sealMu held until the syncfs (renameEpochs), as for the temp file
		}
		b := l.epochsBytesLocked()
		t.epochGen = l.epochGen
		l.mu.RUnlock()
		tmp := filepath.Join(l.dir, epochCheckpoint) + ".cycle.tmp"
		f, err := l.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
		if err == nil {
			_, err = f.Write(b)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				err = errors.Join(err, l.fs.Remove(tmp))
			}
		}
		if err != nil {
			l.sealMu.Unlock()
			return fmt.Errorf("write %s: %w", epochCheckpoint, err)
		}
		t.epochsTmp = true
		return nil // sealMu held: no other cycle writes the temp file or the checkpoint meanwhile
	}
	l.sealMu.Unlock()
	return nil
}

// epochsInPlaceLocked writes a new log's first epoch checkpoint, of one
// epoch, straight into place, unsynced (mu held shared: no truncation or
// reset writes the checkpoint meanwhile): the group's syncfs makes it
// durable, with no temp file, rename or second syncfs. A power cut
// before it leaves no file, or a torn one, which parseEpochCheckpoint
// refuses (the entry count, every line's newline): recovery then
// rebuilds the epochs from the batches, the first segment being there (a
// new log's). The first write to each of 100,000 new partitions opens an
// epoch (issue 27). t.epochsInPlace: syncEnd clears epochsDirty if the
// syncfs succeeded and no epoch came meanwhile.
func (l *Log) epochsInPlaceLocked(t *syncTicket) error {
	f, err := l.fs.OpenFile(filepath.Join(l.dir, epochCheckpoint), os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err == nil {
		_, err = f.Write(l.epochsBytesLocked())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", epochCheckpoint, err)
	}
	t.epochsInPlace, t.epochGen = true, l.epochGen
	return nil
}

// epochsRename ends what syncPrepareGroup began: with synced (the
// group's syncfs made the temp file durable), it renames the temp file
// over the checkpoint unless a truncation wrote a newer one meanwhile;
// else it removes it. renamed: the rename is made, not yet durable.
// Releases sealMu.
func (l *Log) epochsRename(t *syncTicket, synced bool) (renamed bool, err error) {
	defer l.sealMu.Unlock()
	path := filepath.Join(l.dir, epochCheckpoint)
	tmp := path + ".cycle.tmp"
	if synced {
		l.mu.Lock()
		if l.truncGen == t.gen && !l.closed {
			err = l.fs.Rename(tmp, path)
			if err == nil && l.epochGen == t.epochGen {
				l.epochsDirty = false
			}
			l.mu.Unlock()
			if err != nil {
				return false, errors.Join(fmt.Errorf("write %s: %w", epochCheckpoint, err), l.fs.Remove(tmp))
			}
			return true, nil
		}
		l.mu.Unlock()
	}
	return false, l.fs.Remove(tmp)
}

// sealAsync seals old (pendingSeal when the cycle began): fsync its data,
// write and fsync its indexes, then list the new segment in the ordinal
// checkpoint, whose directory fsync makes the new segment's name durable.
// Only the short steps that read or change the log's state take mu.
func (l *Log) sealAsync(old *segment, gen uint64) error {
	if err := old.f.Sync(); err != nil {
		return fmt.Errorf("sync %s at roll: %w", old.f.Name(), err)
	}
	l.mu.RLock()
	if l.pendingSeal != old || l.truncGen != gen || l.closed {
		l.mu.RUnlock()
		return nil // sealed, truncated or removed meanwhile
	}
	old.idxMu.Lock()
	perr := old.openIndexFilesLocked(l)
	if perr == nil {
		// Written but left open: persistLocked would close them, and
		// the fsyncs below would then have nothing to sync (sealed
		// indexes went unsynced until the next recovery rebuilt them).
		perr = old.persistOpenLocked(l, old.size, false)
	}
	// The ticket's reference keeps these open (closeFiles runs at the last unref).
	idx, tf := old.idxFile, old.timeFile
	old.idxMu.Unlock()
	l.mu.RUnlock()
	if perr == nil && idx != nil {
		perr = idx.Sync()
	}
	if perr == nil && tf != nil {
		perr = tf.Sync()
	}
	// A sealed segment keeps no index descriptors open (10,000
	// partitions); whoever closed or replaced them meanwhile is left be.
	old.idxMu.Lock()
	if old.idxFile == idx && old.timeFile == tf {
		old.closeIndexFilesLocked()
	}
	old.idxMu.Unlock()
	l.mu.Lock()
	if l.pendingSeal != old || l.truncGen != gen || l.closed {
		l.mu.Unlock()
		return nil
	}
	if perr != nil {
		if err := l.dropSealedIndex(old, perr); err != nil {
			l.mu.Unlock()
			return err
		}
	}
	l.pendingSeal = nil
	b, cerr := l.ordinalsLocked(-1, 0)
	og := l.ordGen
	l.mu.Unlock()
	if cerr == nil {
		cerr = l.replaceIfCurrent(ordinalCheckpoint, b, func() bool { return l.ordGen == og && l.truncGen == gen })
	}
	if cerr != nil {
		// Only the checkpoint: recovery counts the batches of the segment
		// before an unlisted one. The name must still be made durable.
		l.dirLogger().Warn("storage: ordinal checkpoint at roll", "dir", l.dir, "err", cerr)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("sync dir %s at roll: %w", l.dir, err)
	}
	return nil
}

// writeEpochsAsync writes the epoch checkpoint the last appends made dirty:
// written and fsynced off mu, renamed into place under mu only if no
// truncation wrote a newer one meanwhile, then the directory fsynced.
func (l *Log) writeEpochsAsync(gen uint64) error {
	l.mu.RLock()
	if !l.epochsDirty || l.truncGen != gen || l.closed {
		l.mu.RUnlock()
		return nil
	}
	b := l.epochsBytesLocked()
	eg := l.epochGen
	l.mu.RUnlock()
	renamed := false
	err := l.replaceIfCurrent(epochCheckpoint, b, func() bool {
		if l.truncGen != gen {
			return false
		}
		if l.epochGen == eg {
			l.epochsDirty = false
		}
		l.noEpochFile = false
		renamed = true
		return true
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", epochCheckpoint, err)
	}
	if !renamed {
		return nil
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("write %s: sync dir: %w", epochCheckpoint, err)
	}
	return nil
}

// replaceIfCurrent writes data to name's cycle temp file and fsyncs it off
// mu, then, under mu, renames it over name if current() (called with mu
// held) still says so. The caller fsyncs the directory. The temp file's
// name differs from WriteFileAtomic's, which writers under mu use.
func (l *Log) replaceIfCurrent(name string, data []byte, current func() bool) error {
	path := filepath.Join(l.dir, name)
	tmp := path + ".cycle.tmp"
	f, err := l.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		l.mu.Lock()
		if current() && !l.closed {
			err = l.fs.Rename(tmp, path)
			l.mu.Unlock()
			return err
		}
		l.mu.Unlock()
	}
	return errors.Join(err, l.fs.Remove(tmp))
}

// Failed returns the error that stopped the log (a failed fsync or write),
// nil while it works. A failed log takes no appends until it is truncated
// to its durable offset or reopened: what was written after the last good
// fsync is in an unknown state.
func (l *Log) Failed() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.failed
}

func (l *Log) failLocked(err error) {
	if l.failed == nil {
		l.failed = err
		l.dirLogger().Error("storage: log failed; refusing appends until truncated to the durable offset or reopened", "err", err, "durable", l.durable.Load())
	}
	l.wake()
}

func (l *Log) advanceDurableLocked(off int64) {
	if off > l.durable.Load() {
		l.durable.Store(off)
		l.wake()
	}
}

// wake releases every WaitDurable to re-check.
func (l *Log) wake() {
	l.waitMu.Lock()
	if l.waitCh != nil {
		close(l.waitCh)
		l.waitCh = nil
	}
	l.waitMu.Unlock()
}

// syncTicket is one log's part of a sync cycle: what was written when the
// cycle began, and so what the fsync makes durable.
type syncTicket struct {
	l         *Log
	s         *segment
	size, end int64
	gen       uint64
	seal      *segment // pendingSeal when the cycle began (referenced)
	epochs    bool     // the epoch checkpoint was dirty
	flushErr  error    // writing out the segment's buffered appends failed
	// epochsTmp: syncPrepareGroup wrote the epoch checkpoint of
	// epochGen to its temp file, unsynced, and holds sealMu until
	// epochsRename.
	epochsTmp bool
	epochGen  uint64
	// epochsInPlace: syncPrepareGroup wrote a new log's first epoch
	// checkpoint (of epochGen) in place, for the group's syncfs.
	epochsInPlace bool
	// named: the cycle made the segment's name durable (a syncfs, or a
	// directory fsync); wasNamed: it was before.
	named, wasNamed bool
	writeBehind     *appendFile // journaled: its queued buffers go to the file now
}

// syncBegin captures the active segment and end offset for a cycle; ok is
// false if there is nothing to sync (or the log cannot be synced: err).
func (l *Log) syncBegin() (t syncTicket, ok bool, err error) {
	l.mu.RLock()
	if err := l.checkWritableLocked(); err != nil {
		l.mu.RUnlock()
		return t, false, err
	}
	if l.end <= l.durable.Load() && l.pendingSeal == nil && !l.epochsDirty {
		l.mu.RUnlock()
		return t, false, nil
	}
	s := l.active()
	s.ref() // the file stays open even if a Truncate removes the segment
	t = syncTicket{l: l, s: s, size: s.size, end: l.end, gen: l.truncGen, epochs: l.epochsDirty, wasNamed: s.named}
	if t.seal = l.pendingSeal; t.seal != nil {
		t.seal.ref() // its buffered appends go out with its fsync (appendFile.Sync)
	}
	// The appends this cycle covers are queued for writing now
	// (appendbuf.go; appends wait, as they need the lock exclusively, so
	// what was captured is what is queued) and written after the lock is
	// released: appends go on into a fresh buffer while the device writes
	// (an O_DIRECT write waits for it).
	af, isAF := s.f.(*appendFile)
	if isAF {
		af.Detach()
	}
	l.mu.RUnlock()
	if isAF {
		t.flushErr = af.WriteQueued()
	}
	return t, true, nil
}

// syncEnd records the outcome of the fsync covering t: advance the durable
// offset and persist index entries, or fail the log.
func (t syncTicket) syncEnd(err error) error {
	l, s := t.l, t.s
	defer s.unref()
	if t.seal != nil {
		defer t.seal.unref()
	}
	if t.flushErr != nil {
		err = t.flushErr // the fsync, if any, did not cover the appends
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.gen != l.truncGen || l.closed {
		return nil // Truncate/Close synced on their own; this cycle claims nothing
	}
	if err != nil {
		err = fmt.Errorf("sync %s: %w", s.f.Name(), err)
		l.failLocked(err)
		return fmt.Errorf("%w: %s: %w", ErrFailed, l.dir, err)
	}
	l.advanceDurableLocked(t.end)
	if t.epochsInPlace {
		if l.epochGen == t.epochGen {
			l.epochsDirty = false
		}
		l.noEpochFile = false
	}
	s.jpos = max(s.jpos, t.size) // fsynced in the file, or in the journal
	s.named = s.named || t.named
	if s == l.active() {
		s.idxMu.Lock()
		if !s.indexDueLocked(t.size) {
			// Index entries wait for a few more (indexDueLocked): two
			// small writes per log per cycle were 14% of a 1,000-partition
			// node's CPU, and recovery rescans at most the bound.
		} else if !s.idxExists {
			// Creating the two files here cost ~0.8 ms each on an ext4
			// without journal: with 1,000 logs due in the same cycles,
			// every acknowledgement of the node waited ~1.6 s for them.
			// The index creator makes them and writes what is durable;
			// the entries wait in memory meanwhile (a crash costs a
			// longer recovery scan, as before the first bulk write).
			l.queueIndexCreateLocked(s)
		} else if perr := s.persistLocked(l, t.size, false); perr != nil {
			l.dirLogger().Warn("storage: index write failed", "file", s.path(indexSuffix), "err", perr)
		}
		s.idxMu.Unlock()
	}
	return nil
}

// syncOnce fsyncs the active segment and advances the durable offset to the
// end captured before the fsync. Appends continue while it runs.
func (l *Log) syncOnce() error {
	t, ok, err := l.syncBegin()
	if !ok {
		return err
	}
	if err := l.syncPrepare(t); err != nil {
		return t.syncEnd(err)
	}
	err = t.s.f.Sync()
	if err == nil && l.jrel != "" && !t.wasNamed && l.fs.SyncDir(l.dir) == nil {
		t.named = true // the segment may be journaled from the next cycle
	}
	return t.syncEnd(err)
}

// SyncNow fsyncs the log up to its current end on the caller's goroutine,
// without the Syncer: for a caller that waits for the fsync anyway and is
// the only one to sync this log at this moment (the Raft Ready loop with a
// single log to sync). A concurrent Syncer cycle is harmless: each fsync
// claims only the end it saw before it began. It returns the fsync error,
// which fails the log as a Syncer cycle's does.
func (l *Log) SyncNow() error { return l.syncer.syncNowOne(l) }

// Syncer is the Syncer the log's fsyncs go through.
func (l *Log) Syncer() *Syncer { return l.syncer }

// WaitDurable returns once every offset below offset is fsynced, asking the
// Syncer for a cycle. It returns the fsync error if the cycle failed.
func (l *Log) WaitDurable(ctx context.Context, offset int64) error {
	requested := false
	for {
		if l.durable.Load() >= offset {
			return nil
		}
		l.waitMu.Lock()
		if l.waitCh == nil {
			l.waitCh = make(chan struct{})
		}
		ch := l.waitCh
		l.waitMu.Unlock()
		l.mu.RLock()
		err := l.checkWritableLocked()
		end := l.end
		l.mu.RUnlock()
		if l.durable.Load() >= offset {
			return nil
		}
		if err != nil {
			return err
		}
		if offset > end {
			return fmt.Errorf("storage: wait durable %d beyond end %d of %s: %w", offset, end, l.dir, ErrOffsetOutOfRange)
		}
		if !requested || l.syncer.isIdle(l) {
			l.syncer.request(l)
			requested = true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Sync fsyncs everything appended so far.
func (l *Log) Sync() error {
	return l.WaitDurable(context.Background(), l.EndOffset())
}

// StartOffset is the first readable offset.
func (l *Log) StartOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.start
}

// EndOffset is the next offset to assign.
func (l *Log) EndOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.end
}

// DurableOffset: every offset below it is fsynced.
func (l *Log) DurableOffset() int64 { return l.durable.Load() }

// Slice is a range of whole batches in one segment file, for sendfile or
// Bytes. It holds a reference on the segment: the file stays open (and on
// Linux readable) even if the segment is deleted, until Release. A Truncate
// over the range may change the bytes it reads.
type Slice struct {
	File File
	Pos  int64
	Size int
	// BaseOffset and LastOffset bound the offsets of the batches (0, -1 if empty).
	BaseOffset, LastOffset int64
	ref                    *sliceRef
}

type sliceRef struct {
	once   sync.Once
	seg    *segment
	log    *Log          // nil: the bytes need no check (verify.go)
	gen    uint64        // the log's truncGen when the slice was made
	chunks []*cacheChunk // read cache chunks lent out by CachedBytes
	done   func()        // ExternalSlice's release
	unpins []func()      // descriptors pinned by PinFd
}

func (r *sliceRef) release() {
	for _, u := range r.unpins {
		u()
	}
	r.unpins = nil
	if r.seg != nil {
		r.seg.unref()
	}
	for _, c := range r.chunks {
		c.unlend()
	}
	r.chunks = nil
	if r.done != nil {
		r.done()
	}
}

// ExternalSlice is a byte range of a file that is no segment of a Log
// (tiered storage's downloaded segments, checked whole when downloaded),
// to be sent like a segment's (sendfile when f has a descriptor); release
// runs once, when the Slice is released, so f stays open until then.
func ExternalSlice(f File, pos int64, size int, base, last int64, release func()) Slice {
	return Slice{File: f, Pos: pos, Size: size, BaseOffset: base, LastOffset: last, ref: &sliceRef{done: release}}
}

// Bytes reads the range, checking its batches' CRCs unless they were
// checked before (verify.go): corrupt bytes are never returned.
func (s Slice) Bytes() ([]byte, error) { return s.BytesInto(nil) }

// BytesInto is Bytes into buf's memory when it has the room (a reader
// that goes through a log in chunks, tiered storage's upload, then
// allocates nothing per chunk); the result is buf or a new slice.
func (s Slice) BytesInto(buf []byte) ([]byte, error) {
	if s.Size == 0 {
		return nil, nil
	}
	b := buf[:0]
	if cap(b) < s.Size {
		b = make([]byte, s.Size)
	}
	b = b[:s.Size]
	n, err := s.File.ReadAt(b, s.Pos)
	if n < len(b) {
		return nil, fmt.Errorf("storage: read %s at %d: %w", s.File.Name(), s.Pos, err)
	}
	if s.ref != nil && s.ref.log != nil {
		if err := s.ref.log.verifyBytes(s.ref.seg, s.Pos, b, s.ref.gen); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// PinFd returns the descriptor of the Slice's file for sendfile, held
// open until Release (a cached file's may otherwise be closed when idle,
// fdcache.go); 0 if the file has none, or the descriptor cache's pins
// hold half of it already (then Bytes).
func (s Slice) PinFd() uintptr {
	if s.ref == nil {
		return 0 // not from Read: nothing to release it with
	}
	fd, unpin, err := tryPinFd(s.File)
	if err != nil || fd == 0 {
		unpin()
		return 0
	}
	s.ref.unpins = append(s.ref.unpins, unpin)
	return fd
}

// Release drops the Slice's hold on the segment; idempotent.
func (s Slice) Release() {
	if s.ref != nil {
		s.ref.once.Do(s.ref.release)
	}
}

// segmentFor returns the index of the segment that holds offset.
func (l *Log) segmentFor(offset int64) int {
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > offset })
	return max(i-1, 0)
}

// Read returns whole batches starting with the one containing offset, with
// BaseOffset < maxOffset, up to maxBytes but always at least one batch if
// one qualifies (KIP-74). It uses the sparse index: at most about
// index.interval.bytes are walked to find the start and the end.
func (l *Log) Read(offset, maxOffset int64, maxBytes int) (Slice, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return Slice{}, ErrClosed
	}
	if offset < l.start || offset > l.end {
		return Slice{}, fmt.Errorf("storage: read %s at %d, log has [%d, %d): %w", l.dir, offset, l.start, l.end, ErrOffsetOutOfRange)
	}
	if offset == l.end || offset >= maxOffset {
		return Slice{BaseOffset: 0, LastOffset: -1}, nil
	}
	for i := l.segmentFor(offset); i < len(l.segs); i++ {
		s := l.segs[i]
		if err := s.lockIndex(l); err != nil {
			return Slice{}, err
		}
		pos := s.lookupLocked(offset)
		s.idxMu.Unlock()
		// Walk to the batch containing offset.
		var h records.Header
		found := false
		for pos < s.size {
			var err error
			if h, err = l.batchHeader(s, pos); err != nil {
				return Slice{}, err
			}
			if h.LastOffset() >= offset {
				found = true
				break
			}
			pos += int64(h.Size())
		}
		if !found {
			continue // offset is past this segment's last batch
		}
		if h.BaseOffset >= maxOffset {
			return Slice{BaseOffset: 0, LastOffset: -1}, nil
		}
		first := pos
		endPos := pos + int64(h.Size())
		last := h.LastOffset()
		// Jump with the index as far as maxBytes allows, then walk.
		if err := s.lockIndex(l); err != nil {
			return Slice{}, err
		}
		jump := s.farthestLocked(endPos, first+int64(maxBytes), maxOffset)
		s.idxMu.Unlock()
		if jump > endPos {
			endPos = jump
			last = -1 // known below from the last walked header
		}
		for endPos < s.size {
			nh, err := l.batchHeader(s, endPos)
			if err != nil {
				return Slice{}, err
			}
			if nh.BaseOffset >= maxOffset || endPos+int64(nh.Size())-first > int64(maxBytes) {
				break
			}
			endPos += int64(nh.Size())
			last = nh.LastOffset()
		}
		if last < 0 {
			// Stopped right at the index entry: the batch before it ends at
			// endPos; its last offset is one below the entry's batch base.
			nh, err := l.batchHeader(s, endPos)
			if err != nil {
				return Slice{}, err
			}
			last = nh.BaseOffset - 1
		}
		s.ref()
		ref := &sliceRef{seg: s, log: l, gen: l.truncGen}
		if l.noChecks {
			ref.log = nil
		}
		return Slice{File: s.f, Pos: first, Size: int(endPos - first), BaseOffset: h.BaseOffset, LastOffset: last, ref: ref}, nil
	}
	return Slice{BaseOffset: 0, LastOffset: -1}, nil
}

// batchHeader reads and sanity-checks the header at pos in s.
func (l *Log) batchHeader(s *segment, pos int64) (records.Header, error) {
	h, err := readHeader(s.f, pos)
	if err == nil && (h.Length < records.HeaderSize-12 || int64(h.Size()) > s.size-pos) {
		err = fmt.Errorf("batch at %d has length %d past the segment's %d bytes: %w", pos, h.Length, s.size, records.ErrCorrupt)
	}
	if err != nil {
		return h, fmt.Errorf("storage: read %s: %w", s.f.Name(), err)
	}
	return h, nil
}

// OffsetForTimestamp returns the first offset whose batch MaxTimestamp >= ts
// and that batch's MaxTimestamp, found through the time index; (-1, -1) if none.
func (l *Log) OffsetForTimestamp(ts int64) (int64, int64, error) {
	return l.OffsetForTimestampFrom(ts, 0)
}

// OffsetForTimestampFrom is OffsetForTimestamp counting only offsets from
// from on (a log start that holds before its segments are deleted).
func (l *Log) OffsetForTimestampFrom(ts, from int64) (int64, int64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return -1, -1, ErrClosed
	}
	start := max(l.start, from)
	for _, s := range l.segs {
		segMax, _, err := s.maxTimestamp(l)
		if err != nil {
			return -1, -1, err
		}
		if segMax < ts || s.next <= start {
			continue
		}
		if err := s.lockIndex(l); err != nil {
			return -1, -1, err
		}
		pos := s.lookupLocked(s.timeLookupLocked(ts))
		s.idxMu.Unlock()
		for pos < s.size {
			h, err := l.batchHeader(s, pos)
			if err != nil {
				return -1, -1, err
			}
			if h.MaxTimestamp >= ts && h.LastOffset() >= start {
				return max(h.BaseOffset, start), h.MaxTimestamp, nil
			}
			pos += int64(h.Size())
		}
	}
	return -1, -1, nil
}

// MaxTimestamp returns the largest batch timestamp in the log and the base
// offset of its batch, (-1, -1) for an empty log.
func (l *Log) MaxTimestamp() (timestamp, offset int64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	timestamp, offset = -1, -1
	for _, s := range l.segs {
		ts, off, err := s.maxTimestamp(l)
		if err != nil {
			l.dirLogger().Warn("storage: max timestamp", "file", s.f.Name(), "err", err)
			continue
		}
		if ts > timestamp {
			timestamp, offset = ts, off
		}
	}
	return timestamp, offset
}

// Truncate drops every batch with offsets >= offset, which must be a batch
// boundary (or EndOffset). It is durable when it returns. Truncating to at
// most DurableOffset also clears a failed state: what remains is synced.
func (l *Log) Truncate(offset int64) error {
	defer l.journalLock()() // before mu: the cut record precedes the cut
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if offset < l.start || offset > l.end {
		return fmt.Errorf("storage: truncate %s to %d, log has [%d, %d]: %w", l.dir, offset, l.start, l.end, ErrOffsetOutOfRange)
	}
	if offset == l.end && l.failed == nil {
		return nil
	}
	i := l.segmentFor(offset)
	s := l.segs[i]
	var pos, ord int64
	if offset != s.base {
		if err := s.lockIndex(l); err != nil {
			return err
		}
		pos, ord = s.lookupOrdLocked(offset)
		s.idxMu.Unlock()
		for {
			if pos >= s.size {
				if offset == s.next {
					break
				}
				return fmt.Errorf("storage: truncate %s to %d: %w", l.dir, offset, ErrNotBoundary)
			}
			h, err := l.batchHeader(s, pos)
			if err != nil {
				return err
			}
			if h.BaseOffset == offset {
				break
			}
			if h.BaseOffset > offset || h.LastOffset() >= offset {
				return fmt.Errorf("storage: truncate %s to %d: inside batch [%d, %d]: %w", l.dir, offset, h.BaseOffset, h.LastOffset(), ErrNotBoundary)
			}
			pos += int64(h.Size())
			ord++
		}
	}
	// Journaled bytes below the cut reach the segments, then a replay is
	// told to skip the log's records: none may write the cut bytes back.
	if err := l.journalCutLocked(true); err != nil {
		return fmt.Errorf("storage: truncate %s to %d: %w", l.dir, offset, err)
	}
	wasDurable := offset <= l.durable.Load()
	if p := l.pendingSeal; p != nil && (p == s || slices.Contains(l.segs[i+1:], p)) {
		// Active again (synced below) or removed.
		l.pendingSeal = nil
	}
	removed := l.segs[i+1:]
	l.segs = l.segs[:i+1]
	var errs []error
	// Newest first, and durable before the remaining segment is cut: a
	// crash in between must leave a contiguous log (a suffix removed), never
	// a gap with stale segments after it.
	for j := len(removed) - 1; j >= 0; j-- {
		errs = append(errs, l.removeSegmentFiles(removed[j]))
		l.lruForget(removed[j])
		removed[j].unref()
	}
	l.lruForget(s) // active again: its index must stay loaded
	if len(removed) > 0 {
		// The ordinal checkpoint must stop listing the removed segments:
		// a later roll may create a segment of the same name, which a stale
		// entry would declare sealed, with a stale ordinal (crash seed 311).
		// Its directory fsync makes the removals durable too.
		if err := l.writeOrdinalsLocked(-1, 0); err != nil {
			errs = append(errs, err, l.fs.SyncDir(l.dir))
		}
	}
	s.idxMu.Lock()
	s.loaded = true
	errs = append(errs, s.truncateIndexLocked(l, offset, ord))
	// The cut index must be durable before new batches land where the old
	// ones were: a stale entry that came back would point mid-batch.
	if s.idxFile != nil {
		errs = append(errs, s.idxFile.Sync())
	}
	if s.timeFile != nil {
		errs = append(errs, s.timeFile.Sync())
	}
	s.closeIndexFilesLocked()
	s.idxMu.Unlock()
	s.ver.cut(pos)
	if err := s.f.Truncate(pos); err != nil {
		errs = append(errs, err)
	} else {
		s.size = pos
	}
	s.jpos = min(s.jpos, pos) // the file is fsynced below
	if pos == 0 {
		s.firstTS = -1
	}
	s.next = offset
	l.end = offset
	l.truncGen++
	if l.durable.Load() > offset {
		l.durable.Store(offset)
	}
	errs = append(errs, s.f.Sync())
	if l.truncateEpochsLocked(offset) || l.epochsDirty {
		errs = append(errs, l.writeEpochsLocked())
	}
	if offset < l.firstDirty {
		errs = append(errs, l.resetCleanedLocked(offset))
	}
	if err := errors.Join(errs...); err != nil {
		l.failLocked(fmt.Errorf("truncate to %d: %w", offset, err))
		return fmt.Errorf("storage: truncate %s to %d: %w", l.dir, offset, err)
	}
	if l.failed != nil && wasDurable {
		l.dirLogger().Info("storage: log recovered by truncation", "offset", offset)
		l.failed = nil
	}
	l.wake()
	return nil
}

// TruncateFullyAndStartAt drops the whole log and restarts it empty at
// offset (a follower far behind, a Raft snapshot install).
func (l *Log) TruncateFullyAndStartAt(offset int64) error {
	defer l.journalLock()() // before startMu and mu: the cut record precedes the reset
	// startMu: a DeleteBefore still removing files may not remove the
	// segment file this reset creates.
	l.startMu.Lock()
	defer l.startMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if offset < 0 {
		return fmt.Errorf("storage: reset %s to %d: %w", l.dir, offset, ErrOffsetOutOfRange)
	}
	if err := l.resetLocked(offset, l.endOrdinalLocked()); err != nil {
		l.failLocked(err)
		return err
	}
	l.failed = nil
	l.wake()
	return nil
}

// ResetAt is TruncateFullyAndStartAt that also sets the ordinal of the next
// batch (a Raft snapshot install: ordinal = snapshot index + 1, say).
func (l *Log) ResetAt(offset, ordinal int64) error {
	defer l.journalLock()() // before startMu and mu: the cut record precedes the reset
	// startMu: a DeleteBefore still removing files may not remove the
	// segment file this reset creates.
	l.startMu.Lock()
	defer l.startMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if offset < 0 || ordinal < 0 {
		return fmt.Errorf("storage: reset %s to %d/%d: %w", l.dir, offset, ordinal, ErrOffsetOutOfRange)
	}
	if err := l.resetLocked(offset, ordinal); err != nil {
		l.failLocked(err)
		return err
	}
	l.failed = nil
	l.wake()
	return nil
}

func (l *Log) resetLocked(offset, ordinal int64) error {
	// Nothing of the old log needs to survive; a segment of an old name
	// may come back with other bytes: a replay skips the records before.
	if err := l.journalCutLocked(false); err != nil {
		return fmt.Errorf("storage: reset %s: %w", l.dir, err)
	}
	if err := writeFileAtomic(l.fs, filepath.Join(l.dir, startCheckpoint), formatStartCheckpoint(offset)); err != nil {
		return fmt.Errorf("storage: reset %s: %w", l.dir, err)
	}
	var errs []error
	for _, s := range l.segs {
		errs = append(errs, l.removeSegmentFiles(s))
		l.lruForget(s)
		s.unref()
	}
	l.segs = nil
	l.pendingSeal = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("storage: reset %s: %w", l.dir, err)
	}
	if err := l.writeOrdinalsLocked(offset, ordinal); err != nil {
		return fmt.Errorf("storage: reset %s: %w", l.dir, err)
	}
	s, err := l.createSegment(offset, true)
	if err != nil {
		return err
	}
	s.firstOrd = ordinal
	l.segs = []*segment{s}
	l.start, l.end = offset, offset
	if err := l.resetCleanedLocked(offset); err != nil {
		return err
	}
	l.truncGen++
	l.durable.Store(offset)
	l.epochs = nil
	return l.writeEpochsLocked()
}

// removeSegmentFiles removes a segment's files (the caller drops its ref).
func (l *Log) removeSegmentFiles(s *segment) error {
	var errs []error
	for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if err := l.fs.Remove(s.path(suf)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DeleteBefore advances the log start offset (DeleteRecords) to offset and
// removes the segments wholly below it. The start offset is checkpointed.
//
// The file work (the checkpoint, the segments' unlinks, the directory's
// fsync: several fsyncs, tens of milliseconds on a busy disk) runs off
// l.mu, under startMu: only the switch of the start and the segment list
// is under l.mu, so appends (a produce, the Raft Ready loop) never wait
// for a retention or a tiered upload's local delete.
func (l *Log) DeleteBefore(offset int64) error {
	// The start must not pass what a crash keeps: a Raft commit can be
	// ahead of this replica's own fsync (a quorum of followers), and a
	// start beyond the durable end would, after a power cut that loses the
	// batches below it, leave data past a hole whose ordinals nothing
	// records. So make the log durable up to the new start first (rare: a
	// DeleteRecords at the very tail).
	if offset > l.DurableOffset() {
		if err := l.SyncNow(); err != nil {
			return fmt.Errorf("storage: delete %s before %d: %w", l.dir, offset, err)
		}
	}
	l.startMu.Lock()
	defer l.startMu.Unlock()
	l.mu.RLock()
	closed, start, end := l.closed, l.start, l.end
	l.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if offset > end {
		return fmt.Errorf("storage: delete %s before %d beyond end %d: %w", l.dir, offset, end, ErrOffsetOutOfRange)
	}
	if offset <= start {
		return nil
	}
	// Durable before any segment goes. The start only rises under
	// startMu, so the checkpoint written here is never below another's.
	if err := writeFileAtomic(l.fs, filepath.Join(l.dir, startCheckpoint), formatStartCheckpoint(offset)); err != nil {
		return fmt.Errorf("storage: delete %s before %d: %w", l.dir, offset, err)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	if offset > l.end {
		// Truncated below offset meanwhile (only uncommitted data is ever
		// truncated, and offset is committed: not expected). The
		// checkpoint is ahead of the log, as after a crash that lost the
		// tail (settleStartEnd).
		end := l.end
		l.mu.Unlock()
		return fmt.Errorf("storage: delete %s before %d beyond end %d: %w", l.dir, offset, end, ErrOffsetOutOfRange)
	}
	l.start = max(l.start, offset)
	gone := l.detachOldestLocked(func(s *segment) bool { return s.next <= offset })
	l.mu.Unlock()
	return l.removeDetached(gone)
}

// detachOldestLocked takes sealed segments off the front of the log while
// del says so and returns them; removeDetached deletes their files. The
// caller holds l.mu exclusively and startMu.
func (l *Log) detachOldestLocked(del func(*segment) bool) []*segment {
	var gone []*segment
	for len(l.segs) > 1 && del(l.segs[0]) {
		s := l.segs[0]
		l.segs = l.segs[1:]
		if s == l.pendingSeal {
			// Deleted unsealed (retention caught up with the roll): the
			// segments left must be listed in the ordinal checkpoint,
			// which the recovery of an unlisted first segment needs.
			l.pendingSeal = nil
			defer func() {
				if err := l.writeOrdinalsLocked(-1, 0); err != nil {
					l.dirLogger().Warn("storage: ordinal checkpoint after deleting a rolled segment", "dir", l.dir, "err", err)
				}
			}()
		}
		l.lruForget(s)
		gone = append(gone, s)
	}
	if len(gone) > 0 {
		l.start = max(l.start, l.segs[0].base)
		l.truncateEpochsFromStartLocked(l.start)
	}
	return gone
}

// removeDetached deletes the files of segments detachOldestLocked took
// off the log, then makes the deletions durable, off l.mu (the caller
// holds startMu). A reader still holding one of them keeps reading its
// open file; the last reference closes it.
func (l *Log) removeDetached(gone []*segment) error {
	if len(gone) == 0 {
		return nil
	}
	var errs []error
	for _, s := range gone {
		errs = append(errs, l.removeSegmentFiles(s))
		s.unref()
	}
	errs = append(errs, l.fs.SyncDir(l.dir))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("storage: delete segments of %s: %w", l.dir, err)
	}
	return nil
}

// SetConfig changes the configuration; it applies to later operations.
func (l *Log) SetConfig(cfg Config) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cfg = internConfig(cfg.normalize())
	l.maxMessage.Store(int64(l.cfg.MaxMessageBytes))
}

// Config returns the (normalized) configuration.
func (l *Log) Config() Config {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return *l.cfg
}

// EndOffsetForEpoch answers OffsetForLeaderEpoch: the largest epoch <= epoch
// in the log, and the start offset of the next higher epoch (or EndOffset
// if it is the latest); (-1, -1) if no epoch <= epoch is known.
func (l *Log) EndOffsetForEpoch(epoch int32) (int32, int64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	i := sort.Search(len(l.epochs), func(i int) bool { return l.epochs[i].epoch > epoch })
	if i == 0 {
		return -1, -1
	}
	if i == len(l.epochs) {
		return l.epochs[i-1].epoch, l.end
	}
	return l.epochs[i-1].epoch, l.epochs[i].start
}

// EpochAt returns the leader epoch of the batch holding offset, from the
// epoch cache (Raft's Term(i)); -1 if offset is outside [start-1, end) or
// no epoch covers it. The epoch of StartOffset()-1 stays known, as Raft
// needs the term of the entry before its first index.
func (l *Log) EpochAt(offset int64) int32 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if offset < l.start-1 || offset >= l.end {
		return -1
	}
	i := sort.Search(len(l.epochs), func(i int) bool { return l.epochs[i].start > offset })
	if i == 0 {
		return -1
	}
	return l.epochs[i-1].epoch
}

// Epochs returns the leader epoch cache: (epoch, start offset) pairs.
func (l *Log) Epochs() [][2]int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([][2]int64, len(l.epochs))
	for i, e := range l.epochs {
		out[i] = [2]int64{int64(e.epoch), e.start}
	}
	return out
}

// Scan calls fn for every batch from the one containing from to the end
// (as of the call), in order. The batch slice is only valid during fn.
func (l *Log) Scan(from int64, fn func(h records.Header, batch []byte) error) error {
	end := l.EndOffset()
	if st := l.StartOffset(); from < st {
		from = st
	}
	for from < end {
		s, err := l.Read(from, end, 1<<20)
		if err != nil {
			return err
		}
		if s.Size == 0 {
			return nil
		}
		buf, err := s.Bytes()
		s.Release()
		if err != nil {
			return err
		}
		for len(buf) > 0 {
			b, rest, err := records.Next(buf)
			if err != nil {
				return fmt.Errorf("storage: scan %s at %d: %w", l.dir, from, err)
			}
			h, err := records.ParseHeader(b)
			if err != nil {
				return err
			}
			if err := fn(h, b); err != nil {
				return err
			}
			from = h.LastOffset() + 1
			buf = rest
		}
	}
	return nil
}

// ScanHeaders calls fn with the header of every batch from the one
// containing from to the end, reading only the 61-byte headers (rebuilding
// offset maps, e.g. Raft index -> offset, without reading the data). It
// holds the log's read lock: appends wait until it returns.
func (l *Log) ScanHeaders(from int64, fn func(h records.Header) error) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	from = max(from, l.start)
	if from > l.end {
		return fmt.Errorf("storage: scan %s from %d beyond end %d: %w", l.dir, from, l.end, ErrOffsetOutOfRange)
	}
	for i := l.segmentFor(from); i < len(l.segs); i++ {
		s := l.segs[i]
		if err := s.lockIndex(l); err != nil {
			return err
		}
		pos := s.lookupLocked(from)
		s.idxMu.Unlock()
		for pos < s.size {
			h, err := l.batchHeader(s, pos)
			if err != nil {
				return err
			}
			pos += int64(h.Size())
			if h.LastOffset() < from {
				continue
			}
			if err := fn(h); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close syncs (unless failed) and closes the log; waiters get ErrClosed.
func (l *Log) Close() error {
	// A DeleteBefore removing files finishes first, as when it held mu:
	// a caller that removes the directory after Close races no unlink.
	l.startMu.Lock()
	defer l.startMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	var errs []error
	if l.failed == nil && l.pendingSeal != nil {
		errs = append(errs, l.sealPendingLocked())
	}
	if l.failed == nil && l.epochsDirty {
		errs = append(errs, l.writeEpochsLocked())
	}
	if l.failed == nil {
		s := l.active()
		var err error
		if !l.untouchedSinceCleanOpenLocked() {
			err = s.f.Sync()
		}
		if err != nil {
			errs = append(errs, err)
		} else {
			if l.journal != nil && l.pendingSeal == nil {
				l.jflushed = true
				l.journal.logClosed(l) // every byte it journaled is in its segments, fsynced
			}
			l.advanceDurableLocked(l.end)
			s.idxMu.Lock()
			if s.idxExists || len(s.offIdx) > 0 || len(s.timeIdx) > 0 {
				errs = append(errs, s.persistLocked(l, s.size, true))
			} // else an empty segment without index files: nothing to write (10,000 idle logs made 20,000 empty files at their first shutdown)
			s.idxMu.Unlock()
		}
	}
	l.closed = true
	for _, s := range l.segs {
		s.unref()
	}
	l.wake()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("storage: close %s: %w", l.dir, err)
	}
	return nil
}

// untouchedSinceCleanOpenLocked reports whether the log was opened after a
// clean shutdown and its active segment has not changed since: no append,
// truncation, reset or roll. Its bytes are then those the last clean stop
// fsynced (or, by the same rule, the one before it).
func (l *Log) untouchedSinceCleanOpenLocked() bool {
	return l.clean && l.truncGen == 0 && l.end == l.openEnd && l.active() == l.openActive && l.pendingSeal == nil
}

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// Size returns the bytes of record batches in the log's segments (Kafka's
// kafka.log:type=Log,name=Size).
func (l *Log) Size() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.segs {
		n += s.size
	}
	return n
}

// Segments returns the number of segments (for tests and metrics).
func (l *Log) Segments() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.segs)
}

// --- batch ordinals (the Raft index mapping) ---
//
// Every batch has an ordinal: the number of batches before it since the
// log was created (or ResetAt). Raft indexes are dense, Kafka offsets count
// records; ordinals bridge the two. Index entries carry the ordinal within
// the segment and segment-ordinal-checkpoint each segment's first ordinal,
// written before the segment is created.

// EndOrdinal is the ordinal the next appended batch gets.
func (l *Log) EndOrdinal() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.endOrdinalLocked()
}

func (l *Log) endOrdinalLocked() int64 {
	a := l.active()
	return a.firstOrd + a.nbatches
}

// StartOrdinal is the ordinal of the batch holding StartOffset (EndOrdinal
// for an empty log).
func (l *Log) StartOrdinal() (int64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.start == l.end {
		return l.endOrdinalLocked(), nil
	}
	return l.ordinalOfLocked(l.start)
}

// OrdinalOf returns the ordinal of the batch holding offset.
func (l *Log) OrdinalOf(offset int64) (int64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.ordinalOfLocked(offset)
}

func (l *Log) ordinalOfLocked(offset int64) (int64, error) {
	if l.closed {
		return -1, ErrClosed
	}
	if offset < l.start || offset >= l.end {
		return -1, fmt.Errorf("storage: ordinal of %d in %s, log has [%d, %d): %w", offset, l.dir, l.start, l.end, ErrOffsetOutOfRange)
	}
	for i := l.segmentFor(offset); i < len(l.segs); i++ {
		s := l.segs[i]
		if err := s.lockIndex(l); err != nil {
			return -1, err
		}
		pos, ord := s.lookupOrdLocked(offset)
		s.idxMu.Unlock()
		for ; pos < s.size; ord++ {
			h, err := l.batchHeader(s, pos)
			if err != nil {
				return -1, err
			}
			if h.LastOffset() >= offset {
				return s.firstOrd + ord, nil
			}
			pos += int64(h.Size())
		}
	}
	return -1, fmt.Errorf("storage: ordinal of %d in %s: no batch holds it: %w", offset, l.dir, ErrOffsetOutOfRange)
}

// OffsetOfOrdinal returns the base offset of batch ord; EndOffset for
// ord == EndOrdinal.
func (l *Log) OffsetOfOrdinal(ord int64) (int64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return -1, ErrClosed
	}
	if ord == l.endOrdinalLocked() {
		return l.end, nil
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].firstOrd > ord }) - 1
	if i < 0 || ord > l.endOrdinalLocked() {
		return -1, fmt.Errorf("storage: ordinal %d in %s beyond [%d, %d]: %w", ord, l.dir, l.segs[0].firstOrd, l.endOrdinalLocked(), ErrOffsetOutOfRange)
	}
	s := l.segs[i]
	if err := s.lockIndex(l); err != nil {
		return -1, err
	}
	pos, o := s.lookupByOrdLocked(ord - s.firstOrd)
	s.idxMu.Unlock()
	for ; pos < s.size; o++ {
		h, err := l.batchHeader(s, pos)
		if err != nil {
			return -1, err
		}
		if s.firstOrd+o == ord {
			if h.LastOffset() < l.start {
				return -1, fmt.Errorf("storage: ordinal %d in %s is below the start offset %d: %w", ord, l.dir, l.start, ErrOffsetOutOfRange)
			}
			return h.BaseOffset, nil
		}
		pos += int64(h.Size())
	}
	return -1, fmt.Errorf("storage: ordinal %d in %s: segment %s ends first: %w", ord, l.dir, s.f.Name(), records.ErrCorrupt)
}

// segmentBatches counts the batches of a sealed segment (recovery only).
func (l *Log) segmentBatches(s *segment) (int64, error) {
	if err := s.lockIndex(l); err != nil {
		return 0, err
	}
	pos, ord := int64(0), int64(0)
	if n := len(s.offIdx); n > 0 {
		pos, ord = int64(s.offIdx[n-1].pos), int64(s.offIdx[n-1].ord)
	}
	s.idxMu.Unlock()
	for ; pos < s.size; ord++ {
		h, err := l.batchHeader(s, pos)
		if err != nil {
			return 0, err
		}
		pos += int64(h.Size())
	}
	return ord, nil
}

// writeOrdinalsLocked persists every segment's first ordinal, plus
// (newBase, newOrd) for a segment about to be created (newBase < 0: none).
// Segments after pendingSeal are left out: recovery takes an unlisted last
// segment as the sign that the one before it may not be sealed.
func (l *Log) writeOrdinalsLocked(newBase, newOrd int64) error {
	b, err := l.ordinalsLocked(newBase, newOrd)
	if err != nil {
		return err
	}
	l.ordGen++
	if err := writeFileAtomic(l.fs, filepath.Join(l.dir, ordinalCheckpoint), b); err != nil {
		return fmt.Errorf("write %s: %w", ordinalCheckpoint, err)
	}
	return nil
}

// ordinalsLocked formats the ordinal checkpoint (writeOrdinalsLocked).
func (l *Log) ordinalsLocked(newBase, newOrd int64) ([]byte, error) {
	segs := l.segs
	if l.pendingSeal != nil {
		if k := slices.Index(segs, l.pendingSeal); k >= 0 {
			segs = segs[:k+1]
		}
	}
	var b bytes.Buffer
	n := len(segs)
	if newBase >= 0 {
		n++
	}
	fmt.Fprintf(&b, "0\n%d\n", n)
	for _, s := range segs {
		fmt.Fprintf(&b, "%d %d\n", s.base, s.firstOrd)
	}
	if newBase >= 0 {
		fmt.Fprintf(&b, "%d %d\n", newBase, newOrd)
	}
	if b.Len() > maxOrdinalCkpt {
		return nil, fmt.Errorf("%s: %d segments exceed its size limit", ordinalCheckpoint, n)
	}
	return b.Bytes(), nil
}

func parseOrdinalCheckpoint(b []byte) (map[int64]int64, error) {
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) < 2 || lines[0] != "0" {
		return nil, errors.New("bad version line")
	}
	n, err := strconv.Atoi(lines[1])
	if err != nil || n < 0 || n != len(lines)-2 {
		return nil, fmt.Errorf("bad entry count %q", lines[1])
	}
	out := make(map[int64]int64, n)
	var prevBase, prevOrd int64 = -1, -1
	for _, ln := range lines[2:] {
		var base, ord int64
		if _, err := fmt.Sscanf(ln, "%d %d", &base, &ord); err != nil || base <= prevBase || ord < prevOrd {
			return nil, fmt.Errorf("bad entry %q", ln)
		}
		out[base] = ord
		prevBase, prevOrd = base, ord
	}
	return out, nil
}

// checkpointVersions: the format versions of the checkpoints this binary
// reads (the first line of each).
var checkpointVersions = []struct {
	name  string
	known []int
}{
	{startCheckpoint, []int{0}},
	{ordinalCheckpoint, []int{0}},
	{epochCheckpoint, []int{0}},
	{cleanerCheckpoint, []int{0, 1}},
}

// --- leader epoch cache and checkpoints ---

// truncateEpochsLocked drops epochs starting at or after end.
func (l *Log) truncateEpochsLocked(end int64) bool {
	n := len(l.epochs)
	for n > 0 && l.epochs[n-1].start >= end {
		n--
	}
	changed := n != len(l.epochs)
	l.epochs = l.epochs[:n]
	return changed
}

// truncateEpochsFromStartLocked drops epochs wholly below start-1 (the
// epoch of start-1 is kept: Raft asks for the term before its first index).
func (l *Log) truncateEpochsFromStartLocked(start int64) {
	for len(l.epochs) > 1 && l.epochs[1].start <= start-1 {
		l.epochs = l.epochs[1:]
	}
}

// writeEpochsLocked writes the epoch checkpoint durably, under mu (rare
// paths: recovery, truncation, reset, Close; appends leave it to the sync
// cycle, writeEpochsAsync).
func (l *Log) writeEpochsLocked() error {
	l.epochGen++
	l.noEpochFile = false // a torn write of it may be there (in place), or the last one
	if err := writeFileAtomic(l.fs, filepath.Join(l.dir, epochCheckpoint), l.epochsBytesLocked()); err != nil {
		return fmt.Errorf("write %s: %w", epochCheckpoint, err)
	}
	l.epochsDirty = false
	return nil
}

func (l *Log) epochsBytesLocked() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "0\n%d\n", len(l.epochs))
	for _, e := range l.epochs {
		fmt.Fprintf(&b, "%d %d\n", e.epoch, e.start)
	}
	return b.Bytes()
}

func parseEpochCheckpoint(b []byte) ([]epochEntry, error) {
	// Every line ends in a newline: a prefix of a checkpoint (a first
	// one written in place, torn: epochsInPlaceLocked) never parses.
	if !bytes.HasSuffix(b, []byte("\n")) {
		return nil, errors.New("no final newline")
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) < 2 || lines[0] != "0" {
		return nil, errors.New("bad version line")
	}
	n, err := strconv.Atoi(lines[1])
	if err != nil || n < 0 || n != len(lines)-2 || n > maxEpochEntries {
		return nil, fmt.Errorf("bad entry count %q", lines[1])
	}
	out := make([]epochEntry, 0, n)
	for _, ln := range lines[2:] {
		var e epochEntry
		if _, err := fmt.Sscanf(ln, "%d %d", &e.epoch, &e.start); err != nil {
			return nil, fmt.Errorf("bad entry %q", ln)
		}
		if k := len(out); e.epoch < 0 || e.start < 0 || (k > 0 && (e.epoch <= out[k-1].epoch || e.start < out[k-1].start)) {
			return nil, fmt.Errorf("entry %q out of order", ln)
		}
		out = append(out, e)
	}
	return out, nil
}

func formatStartCheckpoint(off int64) []byte { return fmt.Appendf(nil, "0\n%d\n", off) }

func parseStartCheckpoint(b []byte) (int64, error) {
	var v int64
	if _, err := fmt.Sscanf(string(b), "0\n%d\n", &v); err != nil || v < 0 {
		return 0, fmt.Errorf("content %q", b)
	}
	return v, nil
}

// noteEpochLocked extends the cache with a batch's epoch (recovery).
func (l *Log) noteEpochLocked(epoch int32, base int64) {
	if epoch < 0 {
		return
	}
	if n := len(l.epochs); n == 0 || epoch > l.epochs[n-1].epoch {
		if len(l.epochs) < maxEpochEntries {
			l.epochs = append(l.epochs, epochEntry{epoch, base})
		}
	}
}

// rebuildEpochs walks every batch header of the log (checkpoint missing).
func (l *Log) rebuildEpochs() error {
	l.epochs = nil
	for _, s := range l.segs {
		for pos := int64(0); pos < s.size; {
			h, err := l.batchHeader(s, pos)
			if err != nil {
				return fmt.Errorf("storage: open %s: rebuild leader epochs: %w", l.dir, err)
			}
			l.noteEpochLocked(h.PartitionLeaderEpoch, h.BaseOffset)
			pos += int64(h.Size())
		}
	}
	return l.writeEpochsLocked()
}
