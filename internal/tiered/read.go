package tiered

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"holdfast/internal/metadata"
	"holdfast/internal/partition"
	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// downloads bounds the segments being downloaded at once per node;
// readAheadSegments is how many segments past the one being read a
// remote read starts downloading.
const (
	downloads         = 4
	readAheadSegments = 3
)

// cache holds whole downloaded segments in a directory, at most limit
// bytes of them (least recently read out first; one being read stays).
type cache struct {
	dir   string
	limit int64

	mu      sync.Mutex
	entries map[string]*entry
	total   int64
	clock   uint64
	loading map[string]chan struct{}
	failed  map[string]error // the last failed download of a key, until retried
	sem     chan struct{}
	closed  bool
}

type entry struct {
	f    *os.File
	size int64
	used uint64
	refs int
	sc   sidecar
}

func newCache(dir string, limit int64) (*cache, error) {
	if dir == "" {
		return nil, fmt.Errorf("tiered: no cache directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Whatever a previous run left (downloads, uploads) is not indexed.
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return &cache{dir: dir, limit: limit, entries: map[string]*entry{}, loading: map[string]chan struct{}{},
		failed: map[string]error{}, sem: make(chan struct{}, downloads)}, nil
}

func (c *cache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for k, e := range c.entries {
		if e.refs > 0 {
			continue // being sent (by its descriptor): release closes it
		}
		e.f.Close()
		os.Remove(e.f.Name())
		delete(c.entries, k)
	}
}

// acquire returns the cached segment key, holding it until release; or,
// if it is not cached, a channel closed when a download (started here if
// none runs) ends.
func (c *cache) acquire(key string, load func(tmp string) (sidecar, error)) (*entry, <-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		c.clock++
		e.used, e.refs = c.clock, e.refs+1
		return e, nil, nil
	}
	if ch, ok := c.loading[key]; ok {
		return nil, ch, nil
	}
	if err, ok := c.failed[key]; ok {
		delete(c.failed, key) // the next fetch tries again
		return nil, nil, err
	}
	ch := make(chan struct{})
	c.loading[key] = ch
	go func() {
		defer close(ch)
		c.sem <- struct{}{}
		defer func() { <-c.sem }()
		path := filepath.Join(c.dir, strings.ReplaceAll(key, "/", "_"))
		sc, err := load(path)
		var f *os.File
		if err == nil {
			f, err = os.Open(path)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.loading, key)
		if err == nil && c.closed {
			f.Close()
			err = errors.New("tiered: closed")
		}
		if err != nil {
			os.Remove(path)
			c.failed[key] = err
			return
		}
		c.clock++
		c.entries[key] = &entry{f: f, size: sc.Segment.Size, used: c.clock, sc: sc}
		c.total += sc.Segment.Size
		c.evictLocked()
	}()
	return nil, ch, nil
}

func (c *cache) release(e *entry) {
	c.mu.Lock()
	e.refs--
	if c.closed && e.refs == 0 {
		e.f.Close()
		os.Remove(e.f.Name())
		delete(c.entries, c.keyOf(e))
	}
	c.evictLocked()
	c.mu.Unlock()
}

// keyOf is e's key (a closed cache's last holders only).
func (c *cache) keyOf(e *entry) string {
	for k, x := range c.entries {
		if x == e {
			return k
		}
	}
	return ""
}

// evictLocked drops least recently used segments not being read until the
// cache fits its limit.
func (c *cache) evictLocked() {
	if c.total <= c.limit {
		return
	}
	keys := make([]string, 0, len(c.entries))
	for k := range c.entries {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool { return c.entries[keys[a]].used < c.entries[keys[b]].used })
	for _, k := range keys {
		if c.total <= c.limit {
			return
		}
		e := c.entries[k]
		if e.refs > 0 {
			continue
		}
		e.f.Close()
		os.Remove(e.f.Name())
		c.total -= e.size
		delete(c.entries, k)
	}
}

// LogStart is p's log start offset as clients see it: the remote log
// start when remote storage is on and the remote log reaches the local
// one, else the local log start.
func (m *Manager) LogStart(p *partition.Partition) int64 {
	local := p.LogStartOffset()
	if m == nil {
		return local
	}
	mf, ok := m.Manifest(p)
	if !ok || mf.End() < local || mf.Start >= local {
		return local
	}
	return mf.Start
}

// Read serves a consumer's fetch of p at offset from the remote log:
// whole batches from the one holding offset, up to maxBytes but at least
// one, as a range of the cached segment's file that the caller sends like
// a local segment's (sendfile) and must Release: the segment stays cached
// and open until then. If the segment is not in the cache yet, its
// download starts and wait is closed when it ends (the fetch waits on it,
// as on new data); fetches of local data never wait for it.
// errNotRemote: the offset is not in the remote log (the caller answers
// OFFSET_OUT_OF_RANGE).
func (m *Manager) Read(p *partition.Partition, offset int64, maxBytes int) (recs storage.Slice, aborted []partition.AbortedTxn, wait <-chan struct{}, err error) {
	t, ok := m.topicFor(p)
	if !ok {
		return storage.Slice{}, nil, nil, errNotRemote
	}
	mf, ok := m.Manifest(p)
	if !ok {
		return storage.Slice{}, nil, nil, errNotRemote
	}
	seg, ok := mf.Find(offset)
	if !ok {
		return storage.Slice{}, nil, nil, errNotRemote
	}
	key := m.key(t, p.Index(), seg)
	e, wait, err := m.cache.acquire(key, func(path string) (sidecar, error) { return m.download(key, seg, path) })
	if err != nil {
		m.stats.FetchErrors.Add(1)
		return storage.Slice{}, nil, nil, err
	}
	m.readAhead(t, p, mf, seg)
	if e == nil {
		return storage.Slice{}, nil, wait, nil
	}
	pos, end, first, last, err := findBatches(e, offset, maxBytes)
	if err != nil {
		m.cache.release(e)
		m.stats.FetchErrors.Add(1)
		return storage.Slice{}, nil, nil, err
	}
	if end == pos {
		m.cache.release(e)
		return storage.Slice{BaseOffset: 0, LastOffset: -1}, nil, nil, nil
	}
	// The aborted transactions overlapping what is returned.
	for _, a := range e.sc.Aborted {
		if a.LastOffset >= offset && a.FirstOffset <= last {
			aborted = append(aborted, a)
		}
	}
	m.stats.FetchRequests.Add(1)
	m.stats.FetchBytes.Add(end - pos)
	return storage.ExternalSlice(cacheFile{e.f}, pos, int(end-pos), first, last, func() { m.cache.release(e) }), aborted, nil, nil
}

// cacheFile is a cached segment's file as a storage.File, for
// storage.ExternalSlice: only ReadAt, Name and Fd are used.
type cacheFile struct{ *os.File }

func (f cacheFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// readAhead starts the downloads of the readAheadSegments segments after
// seg (being read, or downloaded for a read) that p's remote log has and
// that are neither cached nor loading: a consumer catching up reads them
// next, and without this it would wait for a whole download once per
// segment (docs/benchmarks.md, tiered storage). Within half the cache (so
// read-ahead never evicts the segments it fetched before they are read:
// with segments of the default 1 GiB and the default cache there is none)
// and its download slots.
func (m *Manager) readAhead(t metadata.Topic, p *partition.Partition, mf Manifest, seg Segment) {
	budget := m.cache.limit/2 - seg.Size
	for range readAheadSegments {
		next, ok := mf.Find(seg.Next)
		if !ok || next.Size > budget {
			return
		}
		budget -= next.Size
		key := m.key(t, p.Index(), next)
		if e, _, _ := m.cache.acquire(key, func(path string) (sidecar, error) { return m.download(key, next, path) }); e != nil {
			m.cache.release(e)
		}
		seg = next
	}
}

// download fetches a segment's two objects (at once) and checks them
// against the committed manifest's record (size, CRC-32C, computed as the
// bytes arrive) before any byte is served.
func (m *Manager) download(key string, seg Segment, path string) (sidecar, error) {
	ctx, cancel := context.WithTimeout(m.ctx, 5*time.Minute)
	defer cancel()
	var sc sidecar
	scDone := make(chan error, 1)
	go func() {
		side, err := m.store.Get(ctx, key+".index", maxSidecar)
		if err != nil {
			scDone <- fmt.Errorf("download %s.index: %w", key, err)
			return
		}
		if err := json.Unmarshal(side, &sc); err != nil {
			scDone <- fmt.Errorf("%s.index: %w", key, err)
			return
		}
		scDone <- nil
	}()
	f, err := os.Create(path)
	if err != nil {
		cancel()
		<-scDone
		return sidecar{}, err
	}
	h := crc32.New(castagnoli)
	n, err := m.store.GetTo(ctx, key+".log", io.MultiWriter(f, h), seg.Size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cancel()
		<-scDone
		return sidecar{}, fmt.Errorf("download %s.log: %w", key, err)
	}
	if err := <-scDone; err != nil {
		return sidecar{}, err
	}
	if n != seg.Size || h.Sum32() != seg.CRC || sc.Segment.Base != seg.Base || sc.Segment.Next != seg.Next {
		return sidecar{}, fmt.Errorf("tiered: %s.log does not match its committed record: %d bytes crc32c %08x, want %d bytes crc32c %08x", key, n, h.Sum32(), seg.Size, seg.CRC)
	}
	return sc, nil
}

// findBatches finds the whole batches of a cached segment from the one
// holding offset, up to maxBytes but at least one: the byte range
// [pos, end) and the first and last offsets in it (pos == end: offset is
// past the segment).
func findBatches(e *entry, offset int64, maxBytes int) (pos, end, first, last int64, err error) {
	i := sort.Search(len(e.sc.Index), func(i int) bool { return e.sc.Index[i][0] > offset })
	if i > 0 {
		pos = e.sc.Index[i-1][1]
	}
	var hb [records.HeaderSize]byte
	header := func(at int64) (records.Header, error) {
		if _, err := e.f.ReadAt(hb[:], at); err != nil {
			return records.Header{}, fmt.Errorf("tiered: %s at %d: %w", e.f.Name(), at, err)
		}
		h, err := records.ParseHeader(hb[:])
		if err == nil && (h.Size() < records.HeaderSize || at+int64(h.Size()) > e.size) {
			err = fmt.Errorf("tiered: %s: bad batch at %d", e.f.Name(), at)
		}
		return h, err
	}
	for {
		if pos >= e.size {
			return pos, pos, 0, -1, nil
		}
		h, err := header(pos)
		if err != nil {
			return 0, 0, 0, -1, err
		}
		if h.LastOffset() >= offset {
			first = h.BaseOffset
			break
		}
		pos += int64(h.Size())
	}
	end = pos
	for end < e.size {
		h, err := header(end)
		if err != nil {
			return 0, 0, 0, -1, err
		}
		if end > pos && end+int64(h.Size())-pos > int64(maxBytes) {
			break
		}
		end += int64(h.Size())
		last = h.LastOffset()
	}
	return pos, end, first, last, nil
}

// IsNotRemote reports whether err says the offset is not in the remote log.
func IsNotRemote(err error) bool { return err == errNotRemote }
