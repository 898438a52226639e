package storage

import (
	"hash/maphash"
	"sync"
	"time"
)

// OffsetMap is the log cleaner's key -> latest offset table, Kafka's
// "SkimpyOffsetMap": a fixed array of slots, open addressing with linear
// probing, each slot a 128-bit hash of the key (two independently seeded
// maphash values, so a collision that would drop a live record is
// negligible: about n²/2¹²⁹) and an offset. Its memory is fixed at creation
// (log.cleaner.dedupe.buffer.size): when full, the cleaner cleans the part
// of the dirty section it covers and leaves the rest for the next pass.
// Not safe for concurrent use; each cleaner thread has its own.
type OffsetMap struct {
	s1, s2  maphash.Seed
	slots   []mapSlot
	active  []mapSlot // the slots in use since Reset
	mask    uint64
	n       int // used slots
	maxUsed int // Kafka's log.cleaner.io.buffer.load.factor (0.9) of the slots
}

// mapSlot is one entry; off is offset+1 so that the zero value is empty.
type mapSlot struct {
	h1, h2 uint64
	off    int64
}

// OffsetMapSlotBytes is the memory of one slot.
const OffsetMapSlotBytes = 24

// minOffsetMapBytes keeps a map able to hold a batch of small records.
const minOffsetMapBytes = 64 << 10

// NewOffsetMap returns a map using about bytes of memory (at least 64 KiB;
// the slot count is the largest power of two that fits).
func NewOffsetMap(bytes int) *OffsetMap {
	bytes = max(bytes, minOffsetMapBytes)
	n := 1
	for n*2*OffsetMapSlotBytes <= bytes {
		n *= 2
	}
	m := &OffsetMap{slots: make([]mapSlot, n)}
	m.Reset(0)
	return m
}

// Reset empties the map (and draws new seeds) for at most keys keys: it
// then uses (and clears) only as many slots as that needs, so a pass over
// a small dirty section touches little memory. keys <= 0: all of it.
func (m *OffsetMap) Reset(keys int) {
	n := len(m.slots)
	if keys > 0 {
		want := keys/9*10 + 11 // keys at 90% load
		k := 1024
		for k < want && k < n {
			k *= 2
		}
		n = min(k, n)
	}
	m.active = m.slots[:n]
	clear(m.active)
	m.mask = uint64(n - 1)
	m.maxUsed = n * 9 / 10
	m.n = 0
	m.s1, m.s2 = maphash.MakeSeed(), maphash.MakeSeed()
}

// Len is the number of keys in the map; Cap how many it can take (since
// the last Reset).
func (m *OffsetMap) Len() int { return m.n }
func (m *OffsetMap) Cap() int { return m.maxUsed }

// Bytes is the map's memory.
func (m *OffsetMap) Bytes() int { return len(m.slots) * OffsetMapSlotBytes }

func (m *OffsetMap) find(key []byte) (*mapSlot, uint64, uint64) {
	h1, h2 := maphash.Bytes(m.s1, key), maphash.Bytes(m.s2, key)
	for i := h1 & m.mask; ; i = (i + 1) & m.mask {
		s := &m.active[i]
		if s.off == 0 || s.h1 == h1 && s.h2 == h2 {
			return s, h1, h2
		}
	}
}

// Put records offset as key's latest; false if the key is new and the map
// is full (nothing changed then).
func (m *OffsetMap) Put(key []byte, offset int64) bool {
	s, h1, h2 := m.find(key)
	if s.off == 0 {
		if m.n >= m.maxUsed {
			return false
		}
		m.n++
		s.h1, s.h2 = h1, h2
	}
	s.off = offset + 1
	return true
}

// Get returns key's latest offset, or -1 if the map does not hold it.
func (m *OffsetMap) Get(key []byte) int64 {
	s, _, _ := m.find(key)
	return s.off - 1
}

// Throttle bounds the cleaner's I/O (log.cleaner.io.max.bytes.per.second):
// every byte read or written is taken from a token bucket that fills at
// the rate; callers sleep when it is empty. One Throttle is shared by all
// cleaner threads, as Kafka's is. A nil *Throttle or a rate <= 0 never waits.
type Throttle struct {
	mu    sync.Mutex
	rate  float64 // bytes per second
	avail float64 // may go negative: the debt a caller sleeps off
	last  time.Time
	slept time.Duration
}

// NewThrottle returns a throttle of bytesPerSec (<= 0: unlimited).
func NewThrottle(bytesPerSec float64) *Throttle {
	return &Throttle{rate: bytesPerSec, last: time.Now()}
}

// Wait takes n bytes, sleeping as long as the rate requires, or until
// stop closes.
func (t *Throttle) Wait(n int, stop <-chan struct{}) {
	if t == nil || t.rate <= 0 || n <= 0 {
		return
	}
	t.mu.Lock()
	now := time.Now()
	// At most one second of burst.
	t.avail = min(t.avail+now.Sub(t.last).Seconds()*t.rate, t.rate)
	t.last = now
	t.avail -= float64(n)
	var d time.Duration
	if t.avail < 0 {
		d = time.Duration(-t.avail / t.rate * float64(time.Second))
		t.slept += d
	}
	t.mu.Unlock()
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-stop:
	}
}

// Slept is the total time callers were made to wait.
func (t *Throttle) Slept() time.Duration {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.slept
}
