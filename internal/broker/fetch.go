package broker

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/partition"
	"holdfast/internal/storage"
	"holdfast/internal/tiered"
	"holdfast/internal/wire"
)

// Fetch v4+ (isolation level); v13+ names topics by id; v15 moves the
// replica id into ReplicaState. v17/v18 only add fields a replica sends
// its leader (KIP-853, KIP-1166); Raft replicates here, so consumers are
// the only fetchers and those fields are ignored.

// maxFetchWait bounds MaxWaitMillis so a request cannot park a connection's
// writer for longer than clients' own request timeouts.
const maxFetchWait = 5 * time.Minute

// leaderEpochCode checks a client's current leader epoch (KIP-320); -1
// means the client does not know it and skips the check. Only the leader
// serves, unless follower is set (a consumer's fetch a follower may serve,
// replicaselector.go).
func leaderEpochCode(p *partition.Partition, current int32, follower bool) int16 {
	if p.Failed() != nil { // this replica's storage failed
		return kerr.KafkaStorageError.Code
	}
	if !follower && !p.IsLeader() {
		return kerr.NotLeaderForPartition.Code
	}
	switch epoch := p.LeaderEpoch(); {
	case current < 0 || current == epoch:
		return 0
	case current < epoch:
		return kerr.FencedLeaderEpoch.Code
	default:
		return kerr.UnknownLeaderEpoch.Code
	}
}

// handleFetch answers in the Reply: a fetch only reads, so it need not be
// ordered with other requests' Handle, and it may long-poll. The session
// (fetchsession.go) is brought up to date here, in request order.
func (b *Broker) handleFetch(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.FetchRequest)
	f, code := b.fetchSessions.begin(req, r.Principal.String(), time.Now())
	if code != 0 {
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.ErrorCode = code
		return wire.Respond(resp)
	}
	wait := min(time.Duration(req.MaxWaitMillis)*time.Millisecond, maxFetchWait)
	listener := b.listenerName(r)
	// READ on each topic, decided once (TOPIC_AUTHORIZATION_FAILED).
	var denied map[string]bool
	for _, rt := range f.topics {
		name := rt.Topic
		if req.Version >= 13 {
			n, ok := b.meta.TopicName(rt.TopicID)
			if !ok {
				continue // UNKNOWN_TOPIC_ID, as for anyone
			}
			name = n
		}
		if !b.authorize(r, auth.OpRead, auth.ResourceTopic, name) {
			if denied == nil {
				denied = map[string]bool{}
			}
			denied[name] = true
		}
	}
	// What goes to the client, once per request (not per long-poll
	// attempt): leader hints where another node leads (KIP-951), then the
	// response cut to what is new for its fetch session.
	send := func(out kmsg.Response) kmsg.Response {
		b.fetchLeaderHints(req.Version, fetchResponseOf(out), listener)
		b.fetchSessions.cut(f, out)
		return out
	}
	return func(ctx context.Context) kmsg.Response {
		out := fetchLongPoll(ctx, wait, func() (kmsg.Response, bool, []<-chan struct{}) {
			return b.fetchOnce(req, f.topics, denied)
		})
		if out == nil {
			return nil // connection gone; nothing to write
		}
		return send(out)
	}
}

// fetchLongPoll is a fetch's wait (MaxWaitMillis and MinBytes): it reads
// with attempt and answers at once if attempt says the answer is ready
// (MinBytes reached, an error to report), if the request does not wait,
// or if there is nothing to wait on; otherwise it sleeps until one of
// the partitions' high watermarks moves (a channel attempt returned is
// closed) and reads again, until ready or until wait has passed since the
// first read, when it reads a last time and answers with whatever there
// is. An attempt not sent has its files released. nil: the connection
// closed (ctx ended) and nothing is to be written.
func fetchLongPoll(ctx context.Context, wait time.Duration, attempt func() (resp kmsg.Response, ready bool, notify []<-chan struct{})) kmsg.Response {
	var deadline <-chan time.Time
	for {
		resp, ready, notify := attempt()
		if ready || wait <= 0 || len(notify) == 0 {
			return resp
		}
		releaseFiles(resp) // this attempt is not sent
		if deadline == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		cases := make([]reflect.SelectCase, 0, len(notify)+2)
		cases = append(cases,
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(deadline)})
		for _, ch := range notify {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
		}
		switch i, _, _ := reflect.Select(cases); i {
		case 0:
			return nil
		case 1:
			resp, _, _ = attempt()
			return resp
		}
	}
}

// fetchOnce reads every partition of topics (the request's, or its
// session's) once. ready reports whether the
// response should go now (MinBytes reached, or an error to report);
// otherwise notify holds the channels that signal new data.
//
// The records are the stored batches as they are, and they are not copied:
// each partition's records are a byte range of a segment file that the
// connection writer sends with sendfile (wire.Spliced), straight from the
// page cache. A log on a filesystem without file descriptors (the tests'
// CrashFS) is read into the response instead.
func (b *Broker) fetchOnce(req *kmsg.FetchRequest, topics []kmsg.FetchRequestTopic, denied map[string]bool) (out kmsg.Response, ready bool, notify []<-chan struct{}) {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	fr := &fetchRead{
		req:           req,
		files:         &wire.Spliced{Response: resp},
		readCommitted: req.IsolationLevel == 1,
		remaining:     int(req.MaxBytes),
		// A consumer's fetch (not a replica's: -1), which KIP-392 lets a
		// follower serve.
		consumer: req.ReplicaID < 0,
	}
	if fr.remaining <= 0 {
		fr.remaining = 1 << 30
	}
	if req.Version >= 15 {
		fr.consumer = req.ReplicaState.ID < 0
	}
	for _, rt := range topics {
		resp.Topics = append(resp.Topics, b.fetchTopic(fr, &rt, denied))
	}
	if fr.total >= int(req.MinBytes) && fr.total > 0 || req.MinBytes <= 0 {
		fr.ready = true
	}
	out = resp
	if len(fr.slices) > 0 {
		fr.files.Release = func() {
			for _, s := range fr.slices {
				s.Release()
			}
		}
		out = fr.files
	}
	return out, fr.ready, fr.notify
}

// fetchRead is one pass of fetchOnce over a request's partitions: the
// room left in the response and what the pass found so far.
type fetchRead struct {
	req           *kmsg.FetchRequest
	files         *wire.Spliced   // the response and the file ranges it sends
	slices        []storage.Slice // the ranges files sends, released with it
	readCommitted bool
	consumer      bool // a consumer's fetch, not a replica's
	remaining     int  // bytes left under the request's MaxBytes
	total         int  // record bytes in the response
	ready         bool // an answer to send now (an error to report)
	notify        []<-chan struct{}
}

// fetchTopic reads the partitions of one topic of the request.
func (b *Broker) fetchTopic(fr *fetchRead, rt *kmsg.FetchRequestTopic, denied map[string]bool) kmsg.FetchResponseTopic {
	st := kmsg.NewFetchResponseTopic()
	st.Topic, st.TopicID = rt.Topic, rt.TopicID
	name, topicCode := rt.Topic, int16(0)
	if fr.req.Version >= 13 {
		if n, ok := b.meta.TopicName(rt.TopicID); ok {
			name = n
		} else {
			topicCode = kerr.UnknownTopicID.Code
		}
	}
	if denied[name] {
		topicCode = kerr.TopicAuthorizationFailed.Code
	}
	for i := range rt.Partitions {
		st.Partitions = append(st.Partitions, b.fetchPartition(fr, name, topicCode, &rt.Partitions[i]))
	}
	return st
}

// fetchPartition answers one partition of topic name (topicCode: the
// topic's error, if any): an error, a preferred read replica, watermarks
// only when the response is full, or what its log holds from the fetch
// offset.
func (b *Broker) fetchPartition(fr *fetchRead, name string, topicCode int16, rp *kmsg.FetchRequestTopicPartition) kmsg.FetchResponseTopicPartition {
	sp := kmsg.NewFetchResponseTopicPartition()
	sp.Partition = rp.Partition
	sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
	// Kafka sends empty records, never null: librdkafka rejects a
	// null (size -1) records field as a protocol error.
	sp.RecordBatches = []byte{}
	var p *partition.Partition
	missing := topicCode
	if topicCode == 0 {
		p, missing = b.replicas.Lookup(name, rp.Partition)
	}
	follower := false
	switch {
	case p == nil:
		sp.ErrorCode = missing
	default:
		follower = !p.IsLeader() && b.followerServes(p, fr.req.Version, fr.consumer)
		sp.ErrorCode = leaderEpochCode(p, rp.CurrentLeaderEpoch, follower)
	}
	if sp.ErrorCode != 0 {
		fr.ready = true
		return sp
	}
	if fr.req.Version >= 11 && fr.consumer && !follower {
		if pref := b.preferredReadReplica(p, fr.req.Rack, rp.FetchOffset); pref >= 0 {
			// KIP-392: no records; the consumer reads from pref.
			sp.PreferredReadReplica = pref
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = p.HighWatermark(), p.LastStableOffset(), p.LogStartOffset()
			fr.ready = true
			return sp
		}
	}
	fr.notify = append(fr.notify, p.Notify())
	maxBytes := min(int(rp.PartitionMaxBytes), fr.remaining)
	if fr.total > 0 && maxBytes <= 0 {
		// The response is full; report watermarks only.
		hw := p.HighWatermark()
		sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = hw, p.LastStableOffset(), p.LogStartOffset()
		return sp
	}
	res, slice, err := b.fetchRange(fr, p, rp.FetchOffset, maxBytes, &sp)
	switch {
	case errors.Is(err, partition.ErrOffsetOutOfRange) && follower && rp.CurrentLeaderEpoch < 0 && rp.FetchOffset >= res.LogStartOffset:
		// Past this follower's log: it may not have caught up
		// yet, and a client that sends no leader epoch cannot
		// check with the leader before it resets (as Kafka,
		// KAFKA-14255): nothing yet, ask again.
	case errors.Is(err, partition.ErrOffsetOutOfRange):
		sp.ErrorCode = kerr.OffsetOutOfRange.Code
		fr.ready = true
	case err != nil:
		b.log.Error("fetch: reading log", "topic", name, "partition", rp.Partition, "offset", rp.FetchOffset, "err", err)
		sp.ErrorCode = kerr.KafkaStorageError.Code
		fr.ready = true
	case slice.Size == 0 && len(res.Records) > 0:
		// A compacted log's batches, copied (partition.readCompacted).
		if fr.total > 0 && len(res.Records) > maxBytes {
			break // KIP-74: only the first partition with data may exceed
		}
		fr.total += len(res.Records)
		fr.remaining -= len(res.Records)
		sp.RecordBatches = res.Records
		if fr.readCommitted {
			sp.AbortedTransactions = abortedOf(res.Aborted)
		}
	case slice.Size == 0:
	case fr.total > 0 && slice.Size > maxBytes:
		// Only the first partition with data may exceed the limits
		// (KIP-74); the others wait for the next fetch.
	default:
		recs, err := b.fetchRecords(fr.files, &fr.slices, slice)
		if err != nil {
			b.log.Error("fetch: reading log", "topic", name, "partition", rp.Partition, "offset", rp.FetchOffset, "err", err)
			sp.ErrorCode = kerr.KafkaStorageError.Code
			fr.ready = true
			break
		}
		fr.total += slice.Size
		fr.remaining -= slice.Size
		slice = storage.Slice{} // now owned by the response
		sp.RecordBatches = recs
		if fr.readCommitted {
			sp.AbortedTransactions = abortedOf(res.Aborted)
		}
	}
	slice.Release() // not sent: an error, empty, or no room
	return sp
}

// fetchRange reads p's log from offset, up to maxBytes (at least one
// batch), setting sp's watermarks; below the local log it reads the
// object store's copy (tiered.go), adding a wait for a segment being
// fetched to fr.notify.
func (b *Broker) fetchRange(fr *fetchRead, p *partition.Partition, offset int64, maxBytes int, sp *kmsg.FetchResponseTopicPartition) (partition.ReadResult, storage.Slice, error) {
	res, slice, err := p.ReadFile(offset, max(maxBytes, 1), fr.readCommitted)
	sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = res.HighWatermark, res.LastStableOffset, res.LogStartOffset
	if b.tiered == nil || !errors.Is(err, partition.ErrOffsetOutOfRange) || offset >= res.LogStartOffset {
		return res, slice, err
	}
	// Below the local log: the object store's.
	if recs, aborted, wait, rerr := b.tiered.Read(p, offset, max(maxBytes, 1)); !tiered.IsNotRemote(rerr) {
		// A range of the cached segment's file, sent with sendfile like
		// a local one (fetchPartition).
		slice.Release()
		err, slice, res.Aborted = rerr, recs, aborted
		if wait != nil {
			fr.notify = append(fr.notify, wait)
		}
	} else if b.tiered.RestorePending(p) {
		// A restored topic whose remote log is not committed yet:
		// nothing for now rather than OFFSET_OUT_OF_RANGE, which would
		// reset a consumer past the restored records.
		err = nil
	}
	sp.LogStartOffset = b.tiered.LogStart(p)
	return res, slice, err
}

// abortedOf is where a read_committed consumer skips aborted transactions' records.
func abortedOf(aborted []partition.AbortedTxn) []kmsg.FetchResponseTopicPartitionAbortedTransaction {
	out := make([]kmsg.FetchResponseTopicPartitionAbortedTransaction, 0, len(aborted))
	for _, a := range aborted {
		at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
		at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
		out = append(out, at)
	}
	return out
}

// fetchRecords turns a read's file range into what the response carries: a
// placeholder that the connection writer replaces by the range (sendfile,
// or the bytes from the storage's read cache when it holds them: recent
// data written with log.direct.io is not in the page cache), which then
// belongs to files; or, for a file without a descriptor, the bytes, and the
// range is released.
func (b *Broker) fetchRecords(files *wire.Spliced, slices *[]storage.Slice, s storage.Slice) ([]byte, error) {
	if mem := s.CachedBytes(); mem != nil {
		ph := wire.NewPlaceholder()
		files.Placeholders = append(files.Placeholders, ph)
		files.Ranges = append(files.Ranges, wire.FileRange{Off: s.Pos, Len: s.Size, ReadAt: s.File.ReadAt, Mem: mem})
		*slices = append(*slices, s)
		return ph, nil
	}
	if fd := s.PinFd(); fd != 0 { // open until the Slice is released
		ph := wire.NewPlaceholder()
		files.Placeholders = append(files.Placeholders, ph)
		files.Ranges = append(files.Ranges, wire.FileRange{Fd: fd, Off: s.Pos, Len: s.Size, ReadAt: s.File.ReadAt})
		*slices = append(*slices, s)
		return ph, nil
	}
	defer s.Release()
	return s.Bytes()
}

// releaseFiles lets go of the file ranges of a fetch response not sent.
func releaseFiles(resp kmsg.Response) {
	if sp, ok := resp.(*wire.Spliced); ok && sp.Release != nil {
		sp.Release()
	}
}
