// Package partition is a partition of a topic on this node: its log, the
// Raft group that replicates it (one voter on a single node), its
// watermarks and its idempotent-producer and transaction state. The high
// watermark is what the group committed: a majority of replicas have it,
// each fsynced under flush=sync.
package partition

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"holdfast/internal/raft"
	"holdfast/internal/storage"
)

// deleteSuffix marks a directory renamed aside by DeleteTopic (Kafka uses
// the same suffix). Such directories are removed on start-up if a crash
// interrupted the removal.
const deleteSuffix = "-delete"

type key struct {
	topic string
	index int32
}

// Manager opens and tracks the partitions of this node under one root
// directory, one directory per partition named <topic>-<index>.
type Manager struct {
	root string
	opts storage.Options
	log  *slog.Logger

	mu     sync.Mutex
	parts  map[key]*Partition
	closed bool
	// opening: partitions being opened (outside mu, so that many open
	// at once), each with a channel closed when its open is over.
	opening map[key]chan struct{}
	// snapSync fsyncs the producer snapshot directory for the opens.
	snapSync *dirSyncer
	// rootSync fsyncs the data directory for the opens of new
	// partitions: those created together share its fsyncs.
	rootSync *dirSyncer
	// fsSync: where the filesystem has a syncfs that reports errors
	// (storage.CanSyncFilesystem), the new partitions opening at once
	// make their directories durable with shared syncfs calls instead of
	// three fsyncs each (settleNew). nil: the fsyncs.
	fsSync *dirSyncer
	// unsettled: new partition directories whose settling failed
	// (mu): the next open in this process settles them again.
	unsettled map[string]bool
	// startRaised counts the log starts raised by log-start commands in
	// any partition (LogStartRaises).
	startRaised atomic.Uint64

	verify atomic.Pointer[Verifier] // txn.go

	// onCount, when set, is told the partitions open or opening after
	// each change (under mu: it must be quick and take no lock of ours).
	onCount func(n int)
}

// SetOnCount has fn told the partitions open or being opened whenever
// that number changes (the node's memory limit follows it: the broker's
// memlimit.go). fn runs under the manager's lock: it must be quick and
// must not call back into the manager.
func (m *Manager) SetOnCount(fn func(n int)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onCount = fn
	m.countedLocked()
}

// countedLocked tells onCount the partitions open or opening.
func (m *Manager) countedLocked() {
	if m.onCount != nil {
		m.onCount(len(m.parts) + len(m.opening))
	}
}

// LogStartRaises counts the times a committed log-start command raised a
// partition's log start (partition.LogStartCommand), in any partition of
// this manager: a loop that compacts logs to their raised starts looks at
// the partitions only when it moved (or its last pass left work).
func (m *Manager) LogStartRaises() uint64 { return m.startRaised.Load() }

// NewManager returns a manager for the partitions under root. It removes
// directories left behind by an interrupted DeleteTopic.
func NewManager(root string, opts storage.Options) *Manager {
	if opts.FS == nil {
		opts.FS = storage.OSFS()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m := &Manager{root: root, opts: opts, log: opts.Logger, parts: map[key]*Partition{},
		snapSync: newDirSyncer(opts.FS, filepath.Join(root, snapshotDir)),
		rootSync: newDirSyncer(opts.FS, root)}
	if storage.CanSyncFilesystem(opts.FS) {
		m.fsSync = newFilesystemSyncer(root)
	}
	if names, err := opts.FS.ReadDir(root); err == nil {
		for _, n := range names {
			if strings.HasSuffix(n, deleteSuffix) {
				if err := opts.FS.RemoveAll(filepath.Join(root, n)); err != nil {
					m.log.Warn("removing deleted partition directory", "dir", n, "err", err)
				}
			}
		}
	}
	return m
}

// Dir is the directory of a partition's log.
func (m *Manager) Dir(topic string, index int32) string {
	return filepath.Join(m.root, topic+"-"+strconv.Itoa(int(index)))
}

func (m *Manager) snapshotPath(topic string, index int32) string {
	return snapshotPathIn(m.root, topic, index)
}

func snapshotPathIn(root, topic string, index int32) string {
	return filepath.Join(root, snapshotDir, topic+"-"+strconv.Itoa(int(index))+".snapshot")
}

// Open opens (creating if needed) a partition, rebuilds its producer state
// from the log and joins it to its Raft group. Opening a partition that is
// already open returns it. Different partitions open concurrently (a node
// with thousands of them starts in parallel); an Open of a partition being
// opened waits for that one.
func (m *Manager) Open(topic string, topicID [16]byte, index int32, cfg storage.Config, r Replication) (*Partition, error) {
	k := key{topic, index}
	m.mu.Lock()
	for {
		if m.closed {
			m.mu.Unlock()
			return nil, storage.ErrClosed
		}
		if p := m.parts[k]; p != nil {
			m.mu.Unlock()
			return p, nil
		}
		ch, busy := m.opening[k]
		if !busy {
			break
		}
		m.mu.Unlock()
		<-ch
		m.mu.Lock()
	}
	if m.opening == nil {
		m.opening = map[key]chan struct{}{}
	}
	done := make(chan struct{})
	m.opening[k] = done
	m.countedLocked()
	opts := m.opts
	m.mu.Unlock()
	if r.CleanShutdown {
		opts.CleanShutdown = true
	}

	p, err := m.open(opts, topic, topicID, index, cfg, r)

	m.mu.Lock()
	if err == nil {
		// Also when Close began meanwhile: it waits for the opens under
		// way, then closes what they opened.
		m.parts[k] = p
	}
	delete(m.opening, k)
	close(done)
	m.countedLocked()
	m.mu.Unlock()
	return p, err
}

func (m *Manager) open(opts storage.Options, topic string, topicID [16]byte, index int32, cfg storage.Config, r Replication) (*Partition, error) {
	dir := m.Dir(topic, index)
	made, err := storage.MkdirNew(m.opts.FS, dir)
	if err != nil {
		return nil, fmt.Errorf("partition %s-%d: %w", topic, index, err)
	}
	if made {
		err = m.claimNewDir(dir, topicID)
		opts.NewDir = true
	} else {
		err = m.claimDir(dir, topicID)
	}
	if err != nil {
		return nil, m.openFailed(dir, made, fmt.Errorf("partition %s-%d: %w", topic, index, err))
	}
	l, err := storage.Open(dir, cfg, opts)
	if err != nil {
		return nil, m.openFailed(dir, made, fmt.Errorf("partition %s-%d: %w", topic, index, err))
	}
	m.mu.Lock()
	settle := made || m.unsettled[dir]
	m.mu.Unlock()
	if settle {
		// Before the Raft group starts: its journal must never remember
		// entries of a log whose directory a power cut can take away.
		if err := m.settleNew(dir); err != nil {
			l.Close()
			return nil, m.openFailed(dir, made, fmt.Errorf("partition %s-%d: %w", topic, index, err))
		}
		if !made {
			m.mu.Lock()
			delete(m.unsettled, dir)
			m.mu.Unlock()
		}
	}
	r.startRaised = &m.startRaised
	p, err := newPartition(topic, topicID, index, dir, m.snapSync, l, opts, &m.verify, r)
	if err != nil {
		l.Close()
		return nil, err
	}
	return p, nil
}

// claimNewDir writes partition.metadata into dir, which this open has
// just made: straight into place (no temp file and rename: the directory
// holds nothing to protect, and a torn claim in a directory without data
// is claimed again, claimDir). Durable only with settleNew; under the
// fsyncs (no syncfs), its content is fsynced here, before the
// directory's fsync can make its name durable.
func (m *Manager) claimNewDir(dir string, id [16]byte) error {
	f, err := m.opts.FS.OpenFile(filepath.Join(dir, metadataFile), os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(claimData(id))
	if err == nil && m.fsSync == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// settleNew makes a new partition directory durable - partition.metadata
// and the first segment in it, its own name in the data directory - before
// its Raft group starts and anything is appended: one syncfs shared by
// the partitions being created meanwhile, or else an fsync of the
// directory and one of the data directory (shared).
func (m *Manager) settleNew(dir string) error {
	if m.fsSync != nil {
		return m.fsSync.sync()
	}
	if err := m.opts.FS.SyncDir(dir); err != nil {
		return err
	}
	if filepath.Dir(dir) == filepath.Clean(m.root) {
		return m.rootSync.sync()
	}
	return m.opts.FS.SyncDir(filepath.Dir(dir))
}

// openFailed undoes what a failed open of a directory it made left (no
// data: nothing was appended), so that the retry makes it anew and
// settles it; where the removal fails too, the retry in this process
// settles it (unsettled). Returns err.
func (m *Manager) openFailed(dir string, made bool, err error) error {
	if !made {
		return err
	}
	if rerr := m.opts.FS.RemoveAll(dir); rerr != nil {
		m.mu.Lock()
		if m.unsettled == nil {
			m.unsettled = map[string]bool{}
		}
		m.unsettled[dir] = true
		m.mu.Unlock()
	}
	return err
}

// awaitOpensLocked waits, with mu held (released meanwhile), until no
// partition that match selects is being opened.
func (m *Manager) awaitOpensLocked(match func(key) bool) {
	for {
		var ch chan struct{}
		for k, c := range m.opening {
			if match(k) {
				ch = c
				break
			}
		}
		if ch == nil {
			return
		}
		m.mu.Unlock()
		<-ch
		m.mu.Lock()
	}
}

// Get returns an open partition, or nil.
func (m *Manager) Get(topic string, index int32) *Partition {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.parts[key{topic, index}]
}

// Partitions returns every open partition of topic ("" for all).
func (m *Manager) Partitions(topic string) []*Partition {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Partition
	for k, p := range m.parts {
		if topic == "" || k.topic == topic {
			out = append(out, p)
		}
	}
	return out
}

// DeleteTopic closes every partition of topic and removes its data. The
// directories are first renamed aside, so a topic of the same name can be
// created as soon as this returns.
func (m *Manager) DeleteTopic(topic string) error {
	m.mu.Lock()
	m.awaitOpensLocked(func(k key) bool { return k.topic == topic })
	var victims []*Partition
	for k, p := range m.parts {
		if k.topic == topic {
			victims = append(victims, p)
			delete(m.parts, k)
		}
	}
	m.countedLocked()
	m.mu.Unlock()
	var errs []error
	fsys := m.opts.FS
	for _, p := range victims {
		errs = append(errs, m.removeData(p))
	}
	// Directories of partitions that were never opened in this process:
	// renamed aside too, durably, before they are removed. A removal is
	// durable only with the data directory's fsync, and a power cut
	// before it can bring a directory back at its name, whole or without
	// some of its files (partition.metadata among them, and a new topic
	// of the name would take the rest as its own) - after the deletion
	// was recorded as finished.
	//
	// Directories of this topic already renamed aside by an earlier try
	// whose fsync of the data directory failed (removeData left them):
	// the rename is durable only with this fsync, and until it is, a
	// power cut brings the directory back at its name.
	var asides []string
	if names, err := fsys.ReadDir(m.root); err != nil {
		errs = append(errs, err)
	} else {
		for _, n := range names {
			if idx, ok := strings.CutPrefix(n, topic+"-"); ok {
				if isAside(idx) {
					asides = append(asides, filepath.Join(m.root, n))
					continue
				}
				if i, err := strconv.ParseInt(idx, 10, 32); err == nil {
					var r [4]byte
					rand.Read(r[:])
					aside := filepath.Join(m.root, n) + "." + hex.EncodeToString(r[:]) + deleteSuffix
					// Opened and closed earlier in this process, it may
					// have live journal records (removeDir).
					if err := m.opts.Syncer.Journal().Forget(filepath.Join(m.root, n)); err != nil {
						errs = append(errs, err)
						continue
					}
					if err := fsys.Rename(filepath.Join(m.root, n), aside); err != nil {
						errs = append(errs, err)
						continue
					}
					asides = append(asides, aside)
					if err := fsys.Remove(m.snapshotPath(topic, int32(i))); err != nil && !errors.Is(err, fs.ErrNotExist) {
						errs = append(errs, err)
					}
				}
			}
		}
	}
	if len(asides) > 0 {
		if err := fsys.SyncDir(m.root); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	for _, aside := range asides {
		if err := fsys.RemoveAll(aside); err != nil {
			// Left for the next start-up to remove.
			m.log.Warn("removing deleted partition", "dir", aside, "err", err)
		}
	}
	return errors.Join(errs...)
}

// isAside reports whether rest, a directory name after "<topic>-", is a
// partition directory of that topic renamed aside: "<index>.<8 hex>-delete".
func isAside(rest string) bool {
	idx, r, ok := strings.Cut(rest, ".")
	if !ok {
		return false
	}
	if _, err := strconv.ParseInt(idx, 10, 32); err != nil {
		return false
	}
	h, ok := strings.CutSuffix(r, deleteSuffix)
	if !ok || len(h) != 8 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// Remove closes one partition and removes its data (a replica moved away
// by a reassignment). Removing a partition that is not open is a no-op.
func (m *Manager) Remove(topic string, index int32) error {
	m.mu.Lock()
	m.awaitOpensLocked(func(k key) bool { return k == key{topic, index} })
	p := m.parts[key{topic, index}]
	delete(m.parts, key{topic, index})
	m.countedLocked()
	m.mu.Unlock()
	if p == nil {
		return nil
	}
	return m.removeData(p)
}

// removeData closes p, stops its Raft group here and removes its directory
// and producer snapshot.
// The directory is renamed aside first, so a partition of the same name
// can be opened as soon as this returns.
func (m *Manager) removeData(p *Partition) error {
	var errs []error
	if err := p.rep.host.RemoveGroup(p.rep.group); err != nil && !errors.Is(err, raft.ErrUnknownGroup) {
		errs = append(errs, err)
	}
	if err := p.close(false); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(append(errs, m.removeDir(p.dir, p.snapPath(), p.topic, p.index))...)
}

// RemoveUnopened deletes the data of a partition that is not open here
// (its open failed: the replica manager discards a corrupt replica,
// replica/repair.go). Its Raft group's journal state is the caller's.
func (m *Manager) RemoveUnopened(topic string, index int32) error {
	m.mu.Lock()
	m.awaitOpensLocked(func(k key) bool { return k == key{topic, index} })
	open := m.parts[key{topic, index}] != nil
	m.mu.Unlock()
	if open {
		return fmt.Errorf("partition %s-%d is open", topic, index)
	}
	dir := m.Dir(topic, index)
	if _, err := m.opts.FS.ReadDir(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return m.removeDir(dir, m.snapshotPath(topic, index), topic, index)
}

// removeDir renames a partition's directory aside, durably, and removes
// it and its producer snapshot.
func (m *Manager) removeDir(dir, snapPath, topic string, index int32) error {
	fsys := m.opts.FS
	var errs []error
	var r [4]byte
	rand.Read(r[:])
	aside := dir + "." + hex.EncodeToString(r[:]) + deleteSuffix
	// The data journal must never write this log's bytes into a
	// directory made later at the same name (storage/datajournal.go).
	if err := m.opts.Syncer.Journal().Forget(dir); err != nil {
		return fmt.Errorf("partition %s-%d: %w", topic, index, err)
	}
	if err := fsys.Rename(dir, aside); err != nil {
		return errors.Join(append(errs, fmt.Errorf("partition %s-%d: rename aside: %w", topic, index, err))...)
	}
	if err := fsys.Remove(snapPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := fsys.SyncDir(m.root); err != nil {
		// The rename may not survive a power cut: removing the
		// directory now could bring it back at its name, whole or in
		// part. Left aside for DeleteTopic's retry (or the next
		// start-up) to make durable and remove.
		return errors.Join(append(errs, fmt.Errorf("partition %s-%d: rename aside: %w", topic, index, err))...)
	}
	if err := fsys.RemoveAll(aside); err != nil {
		// Left for the next start-up to remove.
		m.log.Warn("removing deleted partition", "topic", topic, "partition", index, "err", err)
	}
	return errors.Join(errs...)
}

// Close closes every partition, writing producer-state snapshots so the
// next Open need not rescan the logs.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true // no open starts from here
	m.awaitOpensLocked(func(key) bool { return true })
	parts := m.parts
	m.parts = map[key]*Partition{}
	m.mu.Unlock()
	// Each close fsyncs the log and writes a snapshot: with thousands of
	// partitions, in parallel (bounded).
	ch := make(chan *Partition)
	errs := make([]error, closeParallelism)
	var wg sync.WaitGroup
	for w := range closeParallelism {
		wg.Go(func() {
			for p := range ch {
				errs[w] = errors.Join(errs[w], p.close(true))
			}
		})
	}
	for _, p := range parts {
		ch <- p
	}
	close(ch)
	wg.Wait()
	return errors.Join(errs...)
}

// closeParallelism bounds the partitions Close closes at once.
const closeParallelism = 16

// metadataFile names the topic a partition directory belongs to (Kafka's
// partition.metadata: "version: 0" and "topic_id: <id>"). A directory of a
// deleted topic whose removal failed has the same name as a new topic's
// partition; its records must never be served under the new topic.
const metadataFile = storage.MetadataFile

// ErrForeignData: a partition directory holds another topic's data (a
// deleted topic of the same name whose removal has not finished).
var ErrForeignData = errors.New("partition: the directory holds another topic's data")

// claimData is partition.metadata's content for topic id.
func claimData(id [16]byte) []byte {
	return []byte("version: 0\n" + claimLine(id) + "\n")
}

func claimLine(id [16]byte) string {
	return "topic_id: " + base64.RawURLEncoding.EncodeToString(id[:])
}

// claimDir checks that dir belongs to topic id, or writes that it does.
func (m *Manager) claimDir(dir string, id [16]byte) error {
	fsys := m.opts.FS
	path := filepath.Join(dir, metadataFile)
	want := claimLine(id)
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	switch {
	case err == nil:
		buf := make([]byte, 256)
		n, rerr := f.ReadAt(buf, 0)
		f.Close()
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return rerr
		}
		err := checkClaim(path, string(buf[:n]), want)
		if !errors.Is(err, errTornClaim) {
			return err
		}
		// A claim written straight into a new directory (claimNewDir)
		// that a power cut tore. No batch can be in the directory:
		// nothing is appended before the claim is durable. With data,
		// the file is read as before (a claim never torn, or damage).
		if empty, eerr := m.holdsNoData(dir); eerr != nil || !empty {
			return errors.Join(eerr, checkClaim(path, string(buf[:n])+"\n", want))
		}
		m.log.Warn("partition: claiming a new directory again: its partition.metadata is torn and it holds no data", "dir", dir)
		if err := m.rootSync.sync(); err != nil {
			return err
		}
		_, err = storage.WriteFileAtomic(fsys, path, claimData(id))
		return err
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	data := claimData(id)
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		// A new partition. The directory's own name is an entry of the
		// data directory: fsync that first, or a power cut could drop
		// the whole partition directory under a Raft journal that
		// remembers its entries. First, so that a failed fsync leaves
		// the directory empty and the retry comes here again: once
		// partition.metadata is in it, an open takes the directory as
		// made long ago and fsyncs nothing.
		sync := func() error { return fsys.SyncDir(filepath.Dir(dir)) }
		if filepath.Dir(dir) == filepath.Clean(m.root) {
			sync = m.rootSync.sync // the new partitions opening meanwhile share it
		}
		if err := sync(); err != nil {
			return err
		}
		// The log created in it next fsyncs this directory (with its
		// first segment's name), which makes this file's name durable
		// too - one fsync of it instead of two. A crash before that
		// leaves an unclaimed empty directory, claimed again at the
		// next open.
		return storage.WriteFileAtomicNoDirSync(fsys, path, data)
	}
	_, err = storage.WriteFileAtomic(fsys, path, data)
	return err
}

// errTornClaim: partition.metadata has no whole topic_id line (the last
// line lacks its newline, or the file is empty or zeroes).
var errTornClaim = errors.New("partition.metadata is torn")

// checkClaim checks partition.metadata's content b (from path) against
// the claim line want.
func checkClaim(path, b, want string) error {
	lines := strings.Split(b, "\n")
	lines = lines[:len(lines)-1] // the tail after the last newline is not a whole line
	for _, line := range lines {
		// Kafka's version 0 is the only one: a newer file may mean
		// something else by its topic_id.
		if v, ok := strings.CutPrefix(line, "version:"); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				if err := storage.CheckVersion(path, n, 0); err != nil {
					return err
				}
			}
		}
	}
	for _, line := range lines {
		if strings.HasPrefix(line, "topic_id:") {
			if strings.TrimSpace(line) != want {
				return fmt.Errorf("%w (%s, not %s)", ErrForeignData, strings.TrimSpace(line), want)
			}
			return nil
		}
	}
	return fmt.Errorf("%s has no topic_id: %w", path, errTornClaim)
}

// holdsNoData reports whether dir holds nothing but partition.metadata,
// leftovers of atomic writes and empty segments.
func (m *Manager) holdsNoData(dir string) (bool, error) {
	fsys := m.opts.FS
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, n := range names {
		switch {
		case n == metadataFile, strings.HasSuffix(n, ".tmp"):
		case strings.HasSuffix(n, ".log"):
			f, err := fsys.OpenFile(filepath.Join(dir, n), os.O_RDONLY, 0)
			if err != nil {
				return false, err
			}
			size, err := f.Size()
			f.Close()
			if err != nil || size != 0 {
				return false, err
			}
		default:
			return false, nil
		}
	}
	return true, nil
}
