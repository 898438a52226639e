package storage

import (
	"sync"
	"sync/atomic"
	"time"
)

// The read cache keeps the most recently written bytes of segment files in
// memory when they were written with direct I/O (log.direct.io): an
// O_DIRECT write leaves nothing in the page cache, so without it a tailing
// consumer's fetch (sendfile) and the header walk that finds its batches
// would read back from the device what was written a moment ago.
//
// A write-out's buffer is not handed back to its pool once written: it
// joins the file's run of cached chunks, which always ends where the file
// ends and holds exactly the file's bytes (appends only add at the end; a
// Truncate drops every chunk past the cut, a Close all of them). A fetch
// (Slice.CachedBytes) is lent sub-slices of chunks until its Slice is
// released: a chunk dropped meanwhile (evicted, cut) goes back to its pool
// only after that, so the fetch sends what the file held when it read, as
// a held Slice's file range does; reads (ReadAt) copy under the lock. One
// budget per node (a ReadCache, Options.ReadCache: the broker makes one)
// bounds the chunks' memory (counted by their buffers' capacity): the
// oldest chunk of any of its files goes first.

// DefaultReadCacheBytes is the read cache's default budget.
const DefaultReadCacheBytes = 64 << 20

// defaultReadCacheIdle is ReadCache.idle's default.
const defaultReadCacheIdle = 10 * time.Second

type cacheChunk struct {
	f      *appendFile
	pos    int64  // file offset of data[0]
	data   []byte // the bytes, never modified while in the cache or lent
	cost   int64  // memory held (the buffer's capacity)
	queued bool   // in readCache.fifo (guarded by readCache.mu)
	buf    pendBuf

	// lent counts the Slices holding parts of data (CachedBytes) and has
	// chunkGone added once the file dropped the chunk: whoever brings it
	// to exactly chunkGone gives the buffer back to its pool.
	lent atomic.Int64
}

const chunkGone = 1 << 40

// gone: the file dropped c (its mu held, c no longer in its cache).
func (c *cacheChunk) gone() {
	if c.lent.Add(chunkGone) == chunkGone {
		c.buf.release()
	}
}

func (c *cacheChunk) unlend() {
	if c.lent.Add(-1) == chunkGone {
		c.buf.release()
	}
}

// ReadCache is one node's read cache: the budget its logs' cached chunks
// share (Options.ReadCache), and its counters. Two brokers in one process
// each have their own.
type ReadCache struct {
	mu    sync.Mutex
	fifo  []*cacheChunk // oldest first
	head  int           // fifo[:head] are gone
	bytes int64
	limit int64

	// idle: a log no fetch asked the read cache for this long keeps no
	// chunks (a write-only load would otherwise pay for cycling its
	// write-outs through the whole budget: fresh, cold buffers instead of
	// the few warm ones the pool hands back); the first fetch after that
	// is served from the file, and the write-outs after it are kept. 0:
	// always keep (tests).
	idle atomic.Int64

	// Counters (ReadCacheStats).
	hits, misses        atomic.Int64
	hitBytes, missBytes atomic.Int64
	evictions           atomic.Int64
}

// NewReadCache returns a read cache with a budget of limit bytes (0: no
// cache).
func NewReadCache(limit int64) *ReadCache {
	rc := &ReadCache{limit: max(limit, 0)}
	rc.idle.Store(int64(defaultReadCacheIdle))
	return rc
}

// defaultReadCache serves the logs opened without Options.ReadCache (tests
// and tools; a broker passes its own).
var defaultReadCache = NewReadCache(DefaultReadCacheBytes)

// SetLimit sets the budget (0: no cache); the broker sets it from
// log.direct.io.cache.bytes. Chunks over a lowered budget are dropped at
// once.
func (rc *ReadCache) SetLimit(n int64) {
	rc.mu.Lock()
	rc.limit = max(n, 0)
	rc.mu.Unlock()
	rc.add(nil)
}

func (rc *ReadCache) budget() int64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.limit
}

// ReadCacheStats describes the read cache: lookups of fetched ranges (and
// reads of segment bytes) answered from memory or from the file, bytes
// held and the budget.
type ReadCacheStats struct {
	Hits, Misses         int64 // lookups
	HitBytes, MissBytes  int64
	Evictions            int64 // chunks dropped for the budget
	Bytes, Limit, Chunks int64
}

// Stats returns the read cache's counters.
func (rc *ReadCache) Stats() ReadCacheStats {
	rc.mu.Lock()
	st := ReadCacheStats{Bytes: rc.bytes, Limit: rc.limit, Chunks: int64(len(rc.fifo) - rc.head)}
	rc.mu.Unlock()
	st.Hits, st.Misses = rc.hits.Load(), rc.misses.Load()
	st.HitBytes, st.MissBytes = rc.hitBytes.Load(), rc.missBytes.Load()
	st.Evictions = rc.evictions.Load()
	return st
}

// add takes c (nil: none) into the budget and evicts the oldest chunks
// while over it. The caller holds no appendFile's mu (lock order:
// readCache.mu, then appendFile.mu).
func (rc *ReadCache) add(c *cacheChunk) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if c != nil {
		if c.f.cacheGone(c) {
			return // cut or closed before it got here
		}
		c.queued = true
		rc.fifo = append(rc.fifo, c)
		rc.bytes += c.cost
	}
	for rc.bytes > rc.limit && rc.head < len(rc.fifo) {
		v := rc.fifo[rc.head]
		rc.fifo[rc.head] = nil
		rc.head++
		if !v.queued {
			continue // a Truncate or Close gave it back already
		}
		v.queued = false
		rc.bytes -= v.cost
		v.f.dropChunk(v)
		rc.evictions.Add(1)
	}
	if rc.head > 64 && rc.head*2 > len(rc.fifo) {
		n := copy(rc.fifo, rc.fifo[rc.head:])
		clear(rc.fifo[n:])
		rc.fifo = rc.fifo[:n]
		rc.head = 0
	}
}

// remove gives back the budget of chunks a file dropped (Truncate, Close).
// They stay in the fifo until they reach its head, costing nothing.
func (rc *ReadCache) remove(cs []*cacheChunk) {
	if rc == nil || len(cs) == 0 {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, c := range cs {
		if c.queued {
			c.queued = false
			rc.bytes -= c.cost
		}
	}
	// Skip dropped chunks at the head so their memory can go.
	for rc.head < len(rc.fifo) && !rc.fifo[rc.head].queued {
		rc.fifo[rc.head] = nil
		rc.head++
	}
}

// cached: the chunks of the file's cache, in file order, contiguous, the
// last ending where the file's written bytes end (guarded by
// appendFile.mu).

// keepChunk adds the bytes just written at pos to the file's cache (wmu
// held, not mu); it reports whether it took the buffer.
func (a *appendFile) keepChunk(b pendBuf, pos int64) bool {
	if !a.cacheOn.Load() || a.rc == nil || b.back == nil || len(b.data) == 0 || a.rc.budget() == 0 {
		return false
	}
	if idle := a.rc.idle.Load(); idle > 0 && (a.lastFetch == nil || time.Now().UnixNano()-a.lastFetch.Load() > idle) {
		return false // nobody reads this log's recent bytes
	}
	c := &cacheChunk{f: a, pos: pos, data: b.data, cost: int64(cap(*b.back)), buf: b}
	var dropped []*cacheChunk
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return false
	}
	if n := len(a.cached); n > 0 {
		if last := a.cached[n-1]; last.pos+int64(len(last.data)) != pos {
			// Not contiguous: a batch written at once (through the page
			// cache) came between. The cache is a run that ends at the
			// file's end; start a new one.
			dropped = a.cached
			for _, c := range dropped {
				c.gone()
			}
			a.cached = nil
		}
	}
	a.cached = append(a.cached, c)
	a.mu.Unlock()
	a.rc.remove(dropped)
	a.rc.add(c)
	return true
}

// cacheGone reports whether c is no longer in the file's cache (rc.mu
// held).
func (a *appendFile) cacheGone(c *cacheChunk) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, x := range a.cached {
		if x == c {
			return false
		}
	}
	return true
}

// dropChunk removes an evicted chunk (the file's oldest; rc.mu held).
func (a *appendFile) dropChunk(c *cacheChunk) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, x := range a.cached {
		if x == c {
			for _, y := range a.cached[:i+1] {
				y.gone()
			}
			clear(a.cached[:i+1])
			a.cached = a.cached[i+1:]
			if len(a.cached) == 0 {
				a.cached = nil
			}
			return
		}
	}
}

// dropCachedFromLocked cuts the cache at file offset size (mu held) and
// returns the chunks that left it for rc.remove (after mu is released).
// A chunk that straddles the cut goes as a whole.
func (a *appendFile) dropCachedFromLocked(size int64) []*cacheChunk {
	for i, c := range a.cached {
		if c.pos+int64(len(c.data)) > size {
			out := append([]*cacheChunk(nil), a.cached[i:]...)
			for _, c := range out {
				c.gone()
			}
			clear(a.cached[i:])
			a.cached = a.cached[:i]
			if i == 0 {
				a.cached = nil
			}
			return out
		}
	}
	return nil
}

// cachedRangeLocked returns the bytes [off, off+n) from the cache as
// sub-slices of its chunks, or nil if they are not all there (mu held).
func (a *appendFile) cachedRangeLocked(off int64, n int) [][]byte {
	parts, _ := a.cachedChunksLocked(off, n, false)
	return parts
}

// cachedChunksLocked is cachedRangeLocked that also returns the chunks
// the parts come from, lent (to be given back with unlend) if lend.
func (a *appendFile) cachedChunksLocked(off int64, n int, lend bool) ([][]byte, []*cacheChunk) {
	if len(a.cached) == 0 || n <= 0 {
		return nil, nil
	}
	first := a.cached[0]
	last := a.cached[len(a.cached)-1]
	end := off + int64(n)
	if off < first.pos || end > last.pos+int64(len(last.data)) {
		return nil, nil
	}
	var out [][]byte
	var used []*cacheChunk
	for _, c := range a.cached {
		cend := c.pos + int64(len(c.data))
		if cend <= off {
			continue
		}
		if c.pos >= end {
			break
		}
		lo := max(off, c.pos) - c.pos
		hi := min(end, cend) - c.pos
		out = append(out, c.data[lo:hi])
		if lend {
			c.lent.Add(1)
			used = append(used, c)
		}
	}
	return out, used
}

// CachedBytes returns the slice's bytes from the read cache, as parts to
// send one after the other, or nil if they are not all in memory (then
// the file has them: sendfile). The parts are never modified; the caller
// keeps the Slice until it is done with them, as with the file range: the
// chunks' buffers go back to their pool only when dropped from the cache
// and released by every Slice that was lent them.
func (s Slice) CachedBytes() [][]byte {
	a, ok := s.File.(*appendFile)
	if !ok || !a.cacheOn.Load() || a.rc == nil || s.Size == 0 {
		return nil
	}
	if s.ref == nil {
		return nil
	}
	if a.lastFetch != nil {
		if now := time.Now().UnixNano(); now-a.lastFetch.Load() > int64(time.Second) {
			a.lastFetch.Store(now) // at most once a second: one cache line, many fetchers
		}
	}
	a.mu.Lock()
	parts, used := a.cachedChunksLocked(s.Pos, s.Size, true)
	a.mu.Unlock()
	s.ref.chunks = append(s.ref.chunks, used...) // given back by Release
	if parts == nil {
		a.rc.misses.Add(1)
		a.rc.missBytes.Add(int64(s.Size))
		return nil
	}
	a.rc.hits.Add(1)
	a.rc.hitBytes.Add(int64(s.Size))
	return parts
}
