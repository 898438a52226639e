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

// cache holds downloaded segments in a directory, at most limit bytes of
// them (least recently read out first; one being read or downloaded
// stays). A segment is readable while it downloads: its whole batches
// that arrived and passed their CRC-32C are served as soon as they fill
// a fetch (entry.batches), so a consumer never waits for the rest of a
// large segment.
type cache struct {
	dir   string
	limit int64

	mu      sync.Mutex
	entries map[string]*entry
	total   int64
	clock   uint64
	loading map[string]chan struct{} // downloads not readable yet
	failed  map[string]error         // the last failed download of a key, until retried
	sem     chan struct{}
	closed  bool
}

// entry is a cached segment, whole or arriving. f and size are set
// before it is readable; used, refs and gone are the cache's (its mu).
type entry struct {
	f    *os.File
	size int64
	used uint64
	refs int
	gone bool // out of entries (failed, or the cache closed): the last release closes f

	mu    sync.Mutex
	avail int64         // bytes of whole checked batches in f
	done  bool          // all size bytes arrived and the object matched its record
	err   error         // the download failed: nothing past avail will come
	more  chan struct{} // closed when done or err change, or avail reaches want
	want  int64         // the least avail a fetch waits for (0: none waits)
	// index is a sparse offset index of the first avail bytes, built as
	// they arrive: (batch base offset, byte position) about every
	// indexEvery bytes, as the .index object's.
	index [][2]int64
	// aborted are the aborted transactions of the segment (its .index's),
	// known before any transactional batch is readable (a segment without
	// one needs none: clients apply them to transactional batches only).
	aborted []partition.AbortedTxn
}

// lookup is e's offset index and aborted transactions so far.
func (e *entry) lookup() (index [][2]int64, aborted []partition.AbortedTxn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.index, e.aborted
}

// state is what of e can be read now.
func (e *entry) state() (avail int64, done bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.avail, e.done, e.err
}

// waitFor returns a channel closed once avail reaches need, or the
// download ends.
func (e *entry) waitFor(need int64) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.avail >= need || e.done || e.err != nil {
		return closed
	}
	if e.want == 0 || need < e.want {
		e.want = need
	}
	return e.more
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (e *entry) advance(avail int64, done bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.avail, e.done, e.err = avail, done, err
	if done || err != nil || e.want > 0 && avail >= e.want {
		close(e.more)
		e.more, e.want = make(chan struct{}), 0
	}
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
		c.dropLocked(k, e)
	}
}

// dropLocked takes e out of the cache; its file closes now or, if it is
// being sent or downloaded, at its last release.
func (c *cache) dropLocked(key string, e *entry) {
	delete(c.entries, key)
	c.total -= e.size
	e.gone = true
	os.Remove(e.f.Name())
	if e.refs == 0 {
		e.f.Close()
	}
}

// loader downloads a segment into f (in order, from its start; it does
// not close f): it calls publish once, at its start, after which readers
// may read the batches of the entry publish returns as its advance says
// they arrive, and returns when the download ends.
type loader func(f *os.File, publish func(size int64) (*entry, error)) error

// acquire returns the segment key, cached or arriving, holding it until
// release; or, if it is not readable yet, a channel closed when that may
// have changed (a download, started here if none runs, published or
// ended).
func (c *cache) acquire(key string, load loader) (*entry, <-chan struct{}, error) {
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
	go c.download(key, ch, load)
	return nil, ch, nil
}

// download runs load for key within the cache's download slots.
func (c *cache) download(key string, ch chan struct{}, load loader) {
	c.sem <- struct{}{}
	defer func() { <-c.sem }()
	path := filepath.Join(c.dir, strings.ReplaceAll(key, "/", "_"))
	var e *entry
	unwait := func() { // once: readers waiting for key look again
		if c.loading[key] == ch {
			delete(c.loading, key)
			close(ch)
		}
	}
	// One descriptor, written by the download and read (pread, sendfile
	// at an offset) by fetches: the entry owns it once published.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	publish := func(size int64) (*entry, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed {
			return nil, errors.New("tiered: closed")
		}
		// Held (refs) until the download ends: never evicted half-written.
		c.clock++
		e = &entry{f: f, size: size, used: c.clock, refs: 1, more: make(chan struct{})}
		c.entries[key] = e
		c.total += size
		c.evictLocked()
		unwait()
		return e, nil
	}
	if err == nil {
		err = load(f, publish)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	unwait()
	if err != nil {
		c.failed[key] = err
	}
	if e == nil {
		if f != nil {
			f.Close()
			os.Remove(path)
		}
		return
	}
	if err != nil && !e.gone {
		c.dropLocked(key, e)
	}
	if err != nil {
		avail, _, _ := e.state()
		e.advance(avail, false, err)
	}
	c.releaseLocked(e)
}

func (c *cache) release(e *entry) {
	c.mu.Lock()
	c.releaseLocked(e)
	c.mu.Unlock()
}

func (c *cache) releaseLocked(e *entry) {
	e.refs--
	if e.gone && e.refs == 0 {
		e.f.Close()
	}
	c.evictLocked()
}

// evictLocked drops least recently used segments not being read or
// downloaded until the cache fits its limit.
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
		if e := c.entries[k]; e.refs == 0 {
			c.dropLocked(k, e)
		}
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
	e, wait, err := m.cache.acquire(key, m.loader(key, seg))
	if err != nil {
		m.stats.FetchErrors.Add(1)
		return storage.Slice{}, nil, nil, err
	}
	m.readAhead(t, p, mf, seg)
	if e == nil {
		return storage.Slice{}, nil, wait, nil
	}
	pos, end, first, last, wait, err := e.batches(offset, maxBytes)
	if err != nil {
		m.cache.release(e)
		m.stats.FetchErrors.Add(1)
		return storage.Slice{}, nil, nil, err
	}
	if end == pos {
		m.cache.release(e)
		return storage.Slice{BaseOffset: 0, LastOffset: -1}, nil, wait, nil
	}
	// The aborted transactions overlapping what is returned.
	_, abortedTxns := e.lookup()
	for _, a := range abortedTxns {
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
		if e, _, _ := m.cache.acquire(key, m.loader(key, next)); e != nil {
			m.cache.release(e)
		}
		seg = next
	}
}

// loader downloads a segment's .log, checking it as it arrives: each
// batch's CRC-32C, offsets rising within the segment's, before any reader
// sees it; and at the end its size and CRC-32C against the committed
// manifest's record. Readers see the segment at once, each batch as it is
// checked, through an offset index built on the way (the .index's, which
// the same batches define). Only a segment with a transactional batch
// needs its .index (one more GET, from that batch on): its aborted
// transactions must be known before that batch is readable.
func (m *Manager) loader(key string, seg Segment) loader {
	return func(f *os.File, publish func(int64) (*entry, error)) error {
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Minute)
		defer cancel()
		e, err := publish(seg.Size)
		if err != nil {
			return err
		}
		var (
			mu      sync.Mutex // the fields below, and the order of e's advances
			checked int64
			index   [][2]int64
			txnAt   int64      = -1 // the first transactional batch's position (-1: none yet)
			known   bool            // the aborted transactions are in e
			scDone  chan error      // the .index's download (nil: not started)
		)
		readable := func() int64 {
			if txnAt >= 0 && !known {
				return min(checked, txnAt)
			}
			return checked
		}
		fetchSidecar := func() {
			err := func() error {
				sc, err := m.readSidecar(ctx, key, seg)
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				e.mu.Lock()
				e.aborted = sc.Aborted
				e.mu.Unlock()
				known = true
				e.advance(readable(), false, nil)
				return nil
			}()
			if err != nil {
				cancel() // the .log is of no use
			}
			scDone <- err
		}
		bs := newBatchStream(f, seg)
		bs.progress = func(avail int64) {
			mu.Lock()
			defer mu.Unlock()
			checked, index = avail, bs.index
			if txnAt < 0 && bs.txnAt >= 0 {
				txnAt, scDone = bs.txnAt, make(chan error, 1)
				go fetchSidecar()
			}
			e.mu.Lock()
			e.index = index
			e.mu.Unlock()
			e.advance(readable(), false, nil)
		}
		n, err := m.store.GetTo(ctx, key+".log", bs, seg.Size)
		if err == nil {
			err = bs.finish(n)
		}
		if err != nil {
			err = fmt.Errorf("download %s.log: %w", key, err)
			cancel()
		}
		mu.Lock()
		side := scDone
		mu.Unlock()
		if side != nil {
			if serr := <-side; err == nil {
				err = serr
			}
		}
		if err != nil {
			return err
		}
		e.advance(n, true, nil)
		return nil
	}
}

// readSidecar downloads and checks the .index of the segment seg, key.
func (m *Manager) readSidecar(ctx context.Context, key string, seg Segment) (sidecar, error) {
	side, err := m.store.Get(ctx, key+".index", maxSidecar)
	if err != nil {
		return sidecar{}, fmt.Errorf("download %s.index: %w", key, err)
	}
	var sc sidecar
	if err := json.Unmarshal(side, &sc); err != nil {
		return sidecar{}, fmt.Errorf("%s.index: %w", key, err)
	}
	if sc.Segment.Base != seg.Base || sc.Segment.Next != seg.Next {
		return sidecar{}, fmt.Errorf("tiered: %s.index names offsets %d-%d, its committed record %d-%d", key, sc.Segment.Base, sc.Segment.Next, seg.Base, seg.Next)
	}
	return sc, nil
}

// batchStream writes a segment's bytes to w as they arrive and checks
// them batch by batch (Kafka's v2 batches: the CRC-32C in each header
// covers its bytes from the attributes on), calling progress with the end
// of the last whole checked batch once the bytes are in w.
type batchStream struct {
	w        io.Writer
	seg      Segment
	whole    uint32 // CRC-32C of every byte so far
	n        int64  // bytes so far
	hdr      [records.HeaderSize]byte
	hn       int            // header bytes of the current batch so far
	h        records.Header // the current batch's, once hn == HeaderSize
	rem      int64          // bytes of the current batch still to come
	crc      uint32         // CRC-32C of the current batch so far
	last     int64          // last offset of the last checked batch
	checked  int64          // end of the last checked batch
	progress func(checked int64)
	// index is the sparse offset index of the checked batches, as the
	// upload's (copySegment): (base offset, position) about every
	// indexEvery bytes; appended to only (a reader may hold a prefix).
	index       [][2]int64
	lastIndexed int64
	txnAt       int64 // the first transactional batch's position (-1: none)
}

// crcFrom is where a v2 batch's CRC starts: its attributes.
const crcFrom = 21

func newBatchStream(w io.Writer, seg Segment) *batchStream {
	return &batchStream{w: w, seg: seg, last: seg.Base - 1, lastIndexed: -indexEvery, txnAt: -1}
}

func (b *batchStream) Write(p []byte) (int, error) {
	if _, err := b.w.Write(p); err != nil {
		return 0, err
	}
	b.whole = crc32.Update(b.whole, castagnoli, p)
	before := b.checked
	for q := p; len(q) > 0; {
		if b.hn < records.HeaderSize {
			k := copy(b.hdr[b.hn:], q)
			b.hn += k
			q = q[k:]
			if b.hn < records.HeaderSize {
				break
			}
			h, err := records.ParseHeader(b.hdr[:])
			switch {
			case err != nil:
				return 0, err
			case h.Magic != 2 || h.Size() < records.HeaderSize || b.checked+int64(h.Size()) > b.seg.Size:
				return 0, fmt.Errorf("tiered: bad batch at byte %d of a segment of %d", b.checked, b.seg.Size)
			case h.BaseOffset <= b.last || h.LastOffset() < h.BaseOffset || h.LastOffset() >= b.seg.Next:
				return 0, fmt.Errorf("tiered: batch of offsets %d-%d at byte %d: not after %d within the segment's %d-%d",
					h.BaseOffset, h.LastOffset(), b.checked, b.last, b.seg.Base, b.seg.Next)
			}
			b.h, b.rem = h, int64(h.Size()-records.HeaderSize)
			b.crc = crc32.Update(0, castagnoli, b.hdr[crcFrom:])
		} else {
			k := int(min(b.rem, int64(len(q))))
			b.crc = crc32.Update(b.crc, castagnoli, q[:k])
			b.rem -= int64(k)
			q = q[k:]
		}
		if b.rem == 0 {
			if b.crc != b.h.CRC {
				return 0, fmt.Errorf("tiered: batch at byte %d (offsets %d-%d): CRC-32C %08x, its header says %08x",
					b.checked, b.h.BaseOffset, b.h.LastOffset(), b.crc, b.h.CRC)
			}
			if b.checked-b.lastIndexed >= indexEvery {
				b.index = append(b.index, [2]int64{b.h.BaseOffset, b.checked})
				b.lastIndexed = b.checked
			}
			if b.txnAt < 0 && b.h.IsTransactional() {
				b.txnAt = b.checked
			}
			b.checked += int64(b.h.Size())
			b.last = b.h.LastOffset()
			b.hn = 0
		}
	}
	b.n += int64(len(p))
	if b.checked > before && b.progress != nil {
		b.progress(b.checked)
	}
	return len(p), nil
}

// finish checks the whole object, n bytes, against its committed record.
func (b *batchStream) finish(n int64) error {
	if n != b.seg.Size || b.whole != b.seg.CRC || b.checked != n {
		return fmt.Errorf("tiered: does not match its committed record: %d bytes (%d in whole batches) crc32c %08x, want %d bytes crc32c %08x",
			n, b.checked, b.whole, b.seg.Size, b.seg.CRC)
	}
	return nil
}

// batches finds the whole batches of e that arrived, from the one holding
// offset, up to maxBytes but at least one: the byte range [pos, end) and
// the first and last offsets in it. While e downloads, it answers only
// with a full fetch (maxBytes of batches, or all up to the segment's end)
// as a local read of a caught-up log would: a consumer catching up gets
// responses as large as from the local disk, not a trickle of the few
// batches each read from the store adds. pos == end: none; then wait, if
// not nil, is closed when enough more arrived (nil: offset is past the
// segment).
func (e *entry) batches(offset int64, maxBytes int) (pos, end, first, last int64, wait <-chan struct{}, err error) {
	avail, done, derr := e.state()
	pos, end, first, last, err = findBatches(e, offset, maxBytes, avail)
	if err != nil || done || end > pos && (end < avail || end-pos >= int64(maxBytes)) {
		return pos, end, first, last, nil, err
	}
	if derr != nil {
		if end > pos {
			return pos, end, first, last, nil, nil // checked: good to send
		}
		return 0, 0, 0, -1, nil, derr
	}
	return pos, pos, 0, -1, e.waitFor(min(pos+int64(maxBytes), e.size)), nil
}

// findBatches finds the whole batches of a cached segment's first avail
// bytes from the one holding offset, up to maxBytes but at least one: the
// byte range [pos, end) and the first and last offsets in it (pos ==
// end: offset is past them).
func findBatches(e *entry, offset int64, maxBytes int, avail int64) (pos, end, first, last int64, err error) {
	index, _ := e.lookup()
	i := sort.Search(len(index), func(i int) bool { return index[i][0] > offset })
	if i > 0 {
		pos = index[i-1][1]
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
		if pos >= avail {
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
	for end < avail {
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
