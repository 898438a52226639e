package broker

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

// Fetch sessions (KIP-227). A consumer that fetches many partitions names
// them once: the broker keeps the session's partitions and their fetch
// positions, the client sends only what changed (new offsets, added and
// forgotten partitions), and the broker answers only the partitions with
// something new (records, a moved high watermark, last stable offset or
// log start, an error). With a thousand partitions a quiet consumer's
// fetch is a few bytes instead of tens of kilobytes each way.
//
// Sessions are bounded: max.incremental.fetch.session.cache.slots (1,000,
// Kafka's default) sessions per broker and maxSessionPartitions partitions
// each. When the cache is full a new session takes the slot of the least
// recently used one idle for sessionEvictAfter, else the client gets no
// session (SessionID 0) and keeps sending full fetches, as Kafka does. A
// session belongs to the principal that made it: another gets
// FETCH_SESSION_ID_NOT_FOUND. Every fetch is authorized again against the
// session's topics.

// DefaultFetchSessionSlots is max.incremental.fetch.session.cache.slots.
const DefaultFetchSessionSlots = 1000

const (
	maxSessionPartitions = 100_000
	sessionEvictAfter    = 2 * time.Minute
)

type sessionKey struct {
	id        [16]byte // v13+: topics by id
	topic     string   // before v13: by name
	partition int32
}

// sessionPart is one partition of a session: what the client asks for and
// what it was last told.
type sessionPart struct {
	req               kmsg.FetchRequestTopicPartition
	topic             string
	id                [16]byte
	hw, lso, logStart int64
	sentOnce          bool
}

type fetchSession struct {
	id        int32
	epoch     int32 // the epoch the next incremental fetch must carry
	principal string
	byID      bool
	parts     []*sessionPart // in the order they were added
	index     map[sessionKey]*sessionPart
	lastUsed  time.Time
}

type fetchSessions struct {
	mu    sync.Mutex
	slots int
	byID  map[int32]*fetchSession
}

// init sizes the cache; 0 slots: no sessions, every fetch is full.
func (fs *fetchSessions) init(slots int) {
	fs.slots, fs.byID = max(slots, 0), map[int32]*fetchSession{}
}

// Len is how many sessions are cached (metrics).
func (fs *fetchSessions) Len() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.byID)
}

func keyOf(byID bool, topic string, id [16]byte, partition int32) sessionKey {
	if byID {
		return sessionKey{id: id, partition: partition}
	}
	return sessionKey{topic: topic, partition: partition}
}

// sessionFetch is what one fetch request asks of the session layer: the
// partitions to read, and the session whose view the response is cut to
// (nil: a full response).
type sessionFetch struct {
	topics  []kmsg.FetchRequestTopic
	session *fetchSession
	// full: a full response that (re)starts session's view.
	full bool
}

// begin applies req to the session cache, on the connection's reader (in
// request order). It returns the partitions to read, or a top-level error
// code (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH) that makes
// the client start over with a full fetch.
func (fs *fetchSessions) begin(req *kmsg.FetchRequest, principal string, now time.Time) (sessionFetch, int16) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	byID := req.Version >= 13
	switch {
	case req.SessionEpoch == -1: // FINAL: sessionless; close the one named
		delete(fs.byID, req.SessionID)
		return sessionFetch{topics: req.Topics}, 0
	case req.SessionEpoch == 0: // INITIAL: a full fetch that opens a session
		if req.SessionID != 0 {
			delete(fs.byID, req.SessionID)
		}
		s := &fetchSession{principal: principal, byID: byID, epoch: 1, index: map[sessionKey]*sessionPart{}, lastUsed: now}
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				s.set(rt, rp)
			}
		}
		if len(s.parts) == 0 || len(s.parts) > maxSessionPartitions || !fs.makeRoom(now) {
			return sessionFetch{topics: req.Topics}, 0
		}
		for s.id == 0 || fs.byID[s.id] != nil {
			s.id = rand.Int32N(1<<31-1) + 1
		}
		fs.byID[s.id] = s
		return sessionFetch{topics: req.Topics, session: s, full: true}, 0
	}
	s := fs.byID[req.SessionID]
	switch {
	case s == nil || s.principal != principal || s.byID != byID:
		return sessionFetch{}, kerr.FetchSessionIDNotFound.Code
	case s.epoch != req.SessionEpoch:
		return sessionFetch{}, kerr.InvalidFetchSessionEpoch.Code
	}
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			s.set(rt, rp)
		}
	}
	for _, ft := range req.ForgottenTopics {
		for _, p := range ft.Partitions {
			s.forget(keyOf(byID, ft.Topic, ft.TopicID, p))
		}
	}
	if len(s.parts) > maxSessionPartitions {
		delete(fs.byID, s.id)
		return sessionFetch{}, kerr.FetchSessionIDNotFound.Code
	}
	s.epoch++
	if s.epoch <= 0 { // wrapped: 0 and -1 are not incremental epochs
		s.epoch = 1
	}
	s.lastUsed = now
	return sessionFetch{topics: s.request(), session: s}, 0
}

// makeRoom frees a slot if the cache is full: the least recently used
// session, if it has been idle long enough. fs.mu held.
func (fs *fetchSessions) makeRoom(now time.Time) bool {
	if len(fs.byID) < fs.slots {
		return true
	}
	var lru *fetchSession
	for _, s := range fs.byID {
		if lru == nil || s.lastUsed.Before(lru.lastUsed) {
			lru = s
		}
	}
	if lru == nil || now.Sub(lru.lastUsed) < sessionEvictAfter {
		return false
	}
	delete(fs.byID, lru.id)
	return true
}

// set adds or updates a partition of the session.
func (s *fetchSession) set(rt kmsg.FetchRequestTopic, rp kmsg.FetchRequestTopicPartition) {
	k := keyOf(s.byID, rt.Topic, rt.TopicID, rp.Partition)
	if sp := s.index[k]; sp != nil {
		sp.req = rp
		return
	}
	sp := &sessionPart{req: rp, topic: rt.Topic, id: rt.TopicID, hw: -1, lso: -1, logStart: -1}
	s.index[k] = sp
	s.parts = append(s.parts, sp)
}

func (s *fetchSession) forget(k sessionKey) {
	sp := s.index[k]
	if sp == nil {
		return
	}
	delete(s.index, k)
	for i, p := range s.parts {
		if p == sp {
			s.parts = append(s.parts[:i], s.parts[i+1:]...)
			break
		}
	}
}

// request is the session's partitions as a full fetch would name them,
// grouped by topic in the order they were added.
func (s *fetchSession) request() []kmsg.FetchRequestTopic {
	var out []kmsg.FetchRequestTopic
	at := map[sessionKey]int{}
	for _, sp := range s.parts {
		tk := keyOf(s.byID, sp.topic, sp.id, 0)
		i, ok := at[tk]
		if !ok {
			i = len(out)
			at[tk] = i
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = sp.topic, sp.id
			out = append(out, rt)
		}
		out[i].Partitions = append(out[i].Partitions, sp.req)
	}
	return out
}

// cut records what resp tells the client and, for an incremental fetch,
// drops the partitions that have nothing new for it (KIP-227's rules:
// records, a changed high watermark, last stable offset or log start, an
// error, a preferred read replica).
func (fs *fetchSessions) cut(f sessionFetch, out kmsg.Response) {
	s := f.session
	if s == nil {
		return
	}
	resp := fetchResponseOf(out)
	if resp == nil {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	resp.SessionID = s.id
	kept := resp.Topics[:0]
	for _, rt := range resp.Topics {
		parts := rt.Partitions[:0]
		for _, rp := range rt.Partitions {
			if s.update(keyOf(s.byID, rt.Topic, rt.TopicID, rp.Partition), &rp) || f.full {
				parts = append(parts, rp)
			}
		}
		if len(parts) > 0 {
			rt.Partitions = parts
			kept = append(kept, rt)
		}
	}
	resp.Topics = kept
}

// update notes what rp tells the client of a partition and reports whether
// that is news to it.
func (s *fetchSession) update(k sessionKey, rp *kmsg.FetchResponseTopicPartition) bool {
	sp := s.index[k]
	if sp == nil {
		return true // forgotten meanwhile: harmless to send
	}
	news := len(rp.RecordBatches) > 0 || rp.ErrorCode != 0 || rp.PreferredReadReplica >= 0 || !sp.sentOnce ||
		rp.HighWatermark != sp.hw || rp.LastStableOffset != sp.lso || rp.LogStartOffset != sp.logStart
	sp.hw, sp.lso, sp.logStart, sp.sentOnce = rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset, true
	if rp.ErrorCode != 0 {
		// Sent again once the error is gone.
		sp.hw = -1
	}
	return news
}

// fetchResponseOf is the Fetch response inside out (a file-backed
// response wraps it), nil if there is none.
func fetchResponseOf(out kmsg.Response) *kmsg.FetchResponse {
	if sp, ok := out.(*wire.Spliced); ok {
		out = sp.Response
	}
	resp, _ := out.(*kmsg.FetchResponse)
	return resp
}

// FetchSessions is how many fetch sessions this broker keeps (metrics:
// Kafka's NumIncrementalFetchSessions).
func (b *Broker) FetchSessions() int { return b.fetchSessions.Len() }
