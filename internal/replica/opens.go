package replica

import (
	"context"
	"errors"
	"sync"
	"time"

	"holdfast/internal/metadata"
	"holdfast/internal/partition"
)

// The metadata apply does not open replicas itself: a topic of 10,000
// partitions took longer to open than a CreateTopics request may wait
// (the apply, and so the controller's reply, waited for every open). The
// apply queues the opens (QueueOpenTopic, under the lifecycle lock) and
// returns; up to openParallelism workers take them in order, each open
// under the lifecycle lock held shared.
//
// Order with later metadata changes: a change that follows takes the lock
// exclusively, so it waits for the opens under way (never for the queue)
// and the opens still queued run after it. Each re-reads the metadata
// before it opens: a replica whose topic was deleted (or deleted and
// created again: another id) or that a reassignment moved away since is
// not opened, so a delete or a move that comes after a create wins, as it
// did when the apply opened everything itself. The repair loop leaves
// alone a replica whose open is queued (it would reopen it empty, as one
// that lost its data).

// openQueue is the manager's queue of replica opens.
type openQueue struct {
	mu      sync.Mutex
	jobs    []*queuedOpen // in order; entries already taken are skipped
	urgent  []*queuedOpen // asked for by a request (Promote): taken first
	byTP    map[topicPartition]*queuedOpen
	byGroup map[uint64]*queuedOpen // the same by Raft group (PromoteGroup)
	workers int
	pending map[topicPartition]int // queued or running opens per replica
	byTopic map[string]int         // the same summed per topic (WaitOpened)
	changed chan struct{}          // closed when pending shrinks or a worker ends
	stopped bool
	// abandoned: StopBackground dropped queued opens
	abandoned bool

	// settling: opened one-voter replicas whose group has not settled as
	// its leader yet, in the order opened; each still counts as pending
	// until it has (WaitOpened: the answer to a CreateTopics means every
	// partition takes a write). One goroutine (settle, running while
	// settler) waits for them in turn; stopOpens ends its waits (stop)
	// and waits for it as for the workers.
	settling []settlingOpen
	settler  bool
	stop     chan struct{}
}

// settlingOpen is an opened replica that settling waits for.
type settlingOpen struct {
	tp topicPartition
	p  *partition.Partition
}

// queuedOpen is one open of a batch queued by one metadata change (or by
// the start-up's OpenAll).
type queuedOpen struct {
	job     openJob
	batch   *openBatch
	group   uint64 // the replica's Raft group
	taken   bool   // a worker took it (or stopOpens dropped it)
	promote bool   // in urgent
}

// openBatch collects the errors of one QueueOpenTopic call, logged once
// when its last open is done (as OpenTopic's joined error was), and the
// topic as the metadata has it now: Store.Topic clones a topic, and a
// clone of a 10,000-partition topic per open was most of a creation's
// CPU and memory (179 s and 1.5 GiB for three nodes).
type openBatch struct {
	topic string
	left  int
	errs  []error

	mu  sync.Mutex
	gen uint64         // the metadata generation cur is of
	cur metadata.Topic // the topic then (ok: it existed)
	ok  bool
}

// current returns the batch's topic as the metadata has it now. Called
// with the lifecycle lock held (shared), so the metadata does not change
// meanwhile.
func (b *openBatch) current(meta *metadata.Store) (metadata.Topic, bool) {
	gen := meta.Generation()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gen != gen {
		b.cur, b.ok = meta.Topic(b.topic)
		b.gen = gen
	}
	return b.cur, b.ok
}

// QueueOpenTopic queues the opens of this node's replicas of partitions
// from.. of t (what OpenTopic opens) and returns at once. Called with the
// lifecycle lock held, by the metadata apply.
func (m *Manager) QueueOpenTopic(t metadata.Topic, from int32) {
	m.queueOpens(t, m.openJobs(t, from))
}

// queueOpens queues jobs, all of topic t (current in the metadata).
func (m *Manager) queueOpens(t metadata.Topic, jobs []openJob) {
	if len(jobs) == 0 {
		return
	}
	q := &m.opens
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		q.abandoned = true
		return
	}
	if q.pending == nil {
		q.pending = map[topicPartition]int{}
		q.byTopic = map[string]int{}
	}
	if q.byTP == nil {
		q.byTP = map[topicPartition]*queuedOpen{}
		q.byGroup = map[uint64]*queuedOpen{}
	}
	b := &openBatch{topic: t.Name, left: len(jobs), gen: m.meta.Generation(), cur: t, ok: true}
	for _, j := range jobs {
		o := &queuedOpen{job: j, batch: b, group: Group(j.t.ID, j.i)}
		q.jobs = append(q.jobs, o)
		tp := topicPartition{j.t.Name, j.i}
		q.pending[tp]++
		q.byTopic[tp.topic]++
		q.byTP[tp] = o
		q.byGroup[o.group] = o
	}
	for q.workers < openParallelism && q.workers < len(q.jobs) {
		q.workers++
		go m.openWorker()
	}
}

// Promote moves the queued open of partition i of topic, if any, ahead
// of the others: a request asked for it (a partition not yet open after a
// start-up answers a retriable error until it is; see OpenAll).
func (m *Manager) Promote(topic string, i int32) {
	q := &m.opens
	q.mu.Lock()
	defer q.mu.Unlock()
	q.promoteLocked(q.byTP[topicPartition{topic, i}])
}

// PromoteGroup is Promote by Raft group: a peer sent the group what only
// a running replica answers (raft.Host.SetWantedHook), so its other
// replicas are open and electing or leading, and waiting for this one.
// Cheap and never blocking: it runs on the Raft transport's goroutine.
func (m *Manager) PromoteGroup(group uint64) {
	q := &m.opens
	q.mu.Lock()
	defer q.mu.Unlock()
	q.promoteLocked(q.byGroup[group])
}

func (q *openQueue) promoteLocked(o *queuedOpen) {
	if o != nil && !o.taken && !o.promote {
		o.promote = true
		q.urgent = append(q.urgent, o)
	}
}

// nextLocked takes the next open: a promoted one first, then in order.
func (q *openQueue) nextLocked() *queuedOpen {
	for len(q.urgent) > 0 {
		o := q.urgent[0]
		q.urgent[0] = nil
		q.urgent = q.urgent[1:]
		if !o.taken {
			return q.takeLocked(o)
		}
	}
	for len(q.jobs) > 0 {
		o := q.jobs[0]
		q.jobs[0] = nil
		q.jobs = q.jobs[1:]
		if !o.taken {
			return q.takeLocked(o)
		}
	}
	return nil
}

func (q *openQueue) takeLocked(o *queuedOpen) *queuedOpen {
	o.taken = true
	tp := topicPartition{o.job.t.Name, o.job.i}
	if q.byTP[tp] == o {
		delete(q.byTP, tp)
	}
	if q.byGroup[o.group] == o {
		delete(q.byGroup, o.group)
	}
	return o
}

func (m *Manager) openWorker() {
	q := &m.opens
	for {
		q.mu.Lock()
		var o *queuedOpen
		if !q.stopped {
			o = q.nextLocked()
		}
		if o == nil {
			q.workers--
			q.signal()
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()

		p, err := m.runQueued(o.job, o.batch)

		q.mu.Lock()
		tp := topicPartition{o.job.t.Name, o.job.i}
		if p != nil && p.SoleVoter() && !q.stopped {
			// Done once it settled (settle).
			q.settling = append(q.settling, settlingOpen{tp, p})
			if !q.settler {
				q.settler = true
				go m.settle()
			}
		} else {
			q.done(tp)
		}
		q.signal()
		b := o.batch
		if err != nil {
			b.errs = append(b.errs, err)
		}
		b.left--
		last := b.left == 0
		q.mu.Unlock()
		if last && len(b.errs) > 0 {
			m.log.Error("opening replicas", "topic", b.topic, "err", errors.Join(b.errs...))
		}
	}
}

// runQueued opens one queued replica if the metadata, as it is now, still
// assigns it here (see the comment at the top). It returns the replica it
// opened (nil if none); one of a one-voter group has still to settle as
// its leader (settle waits for that, not this worker: the group's first election
// and commit are two Raft cycles, each with an fsync, and a worker that
// waited them out held its slot meanwhile. 32 workers then opened 32
// groups per two cycles; waited for together, the groups being created
// share each cycle. Issue 27: half of the workers' time at 20,000
// partitions.)
func (m *Manager) runQueued(j openJob, b *openBatch) (*partition.Partition, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	cur, ok := b.current(m.meta)
	if !ok || cur.ID != j.t.ID || j.i >= cur.Partitions {
		return nil, nil // deleted (or deleted and created again) since
	}
	switch {
	case m.assignedHere(cur, j.i):
		return m.openReplica(cur, j.i, false, j.clean, true)
	case j.drop && m.parts.Get(cur.Name, j.i) == nil:
		// A replica moved away whose removal a crash interrupted: open it
		// (so its Raft journal state is found) and drop it.
		return nil, errors.Join(m.open(cur, j.i, false, j.clean), m.Drop(cur, j.i))
	}
	return nil, nil // moved away since
}

// settle waits for the replicas in settling, in turn, to settle as their
// groups' leaders (or for their 30 s, as an open waited; or until
// stopOpens), counting each off as it does; it ends when none is left.
func (m *Manager) settle() {
	q := &m.opens
	q.mu.Lock()
	if q.stop == nil {
		q.stop = make(chan struct{})
	}
	stop := q.stop
	q.mu.Unlock()
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-base.Done():
		}
	}()
	q.mu.Lock()
	for len(q.settling) > 0 {
		s := q.settling[0]
		q.settling[0] = settlingOpen{}
		q.settling = q.settling[1:]
		q.mu.Unlock()
		ctx, done := context.WithTimeout(base, 30*time.Second)
		s.p.WaitSettled(ctx)
		done()
		q.mu.Lock()
		q.done(s.tp)
		q.signal()
	}
	q.settling = nil
	q.settler = false
	q.signal()
	q.mu.Unlock()
}

// openQueued reports whether an open of partition i of topic is queued or
// under way.
func (m *Manager) openQueued(topic string, i int32) bool {
	q := &m.opens
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pending[topicPartition{topic, i}] > 0
}

// WaitOpened waits until no open of a replica of topic is queued or under
// way, or ctx ends (its error is returned then). It does not say the opens
// succeeded: Lookup does, replica by replica.
func (m *Manager) WaitOpened(ctx context.Context, topic string) error {
	q := &m.opens
	for {
		q.mu.Lock()
		// A count per topic, not a walk over every pending replica: each
		// finished open wakes every waiter, and with 100,000 partitions
		// being created each walk was long (issue 27).
		if q.byTopic[topic] == 0 {
			q.mu.Unlock()
			return nil
		}
		if q.changed == nil {
			q.changed = make(chan struct{})
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stopOpens drops the queued opens and waits for those under way; the
// ones dropped stay closed (their logs were not opened in this run, so
// Close leaves no clean shutdown marker: the next start recovers them).
func (m *Manager) stopOpens() {
	q := &m.opens
	q.mu.Lock()
	q.stopped = true
	dropped := false
	for _, o := range q.jobs {
		if o.taken {
			continue
		}
		o.taken = true
		dropped = true
		q.done(topicPartition{o.job.t.Name, o.job.i})
	}
	q.jobs, q.urgent, q.byTP, q.byGroup = nil, nil, nil, nil
	if q.stop == nil {
		q.stop = make(chan struct{})
	}
	select {
	case <-q.stop:
	default:
		close(q.stop) // the settler's waits end: the replicas are open
	}
	if dropped {
		q.abandoned = true
		q.signal()
	}
	q.mu.Unlock()
	// The workers under way finish their open and see stopped; the
	// settler ends its waits.
	for {
		q.mu.Lock()
		if q.workers == 0 && !q.settler {
			q.signal()
			q.mu.Unlock()
			return
		}
		if q.changed == nil {
			q.changed = make(chan struct{})
		}
		ch := q.changed
		q.mu.Unlock()
		<-ch
	}
}

// done counts off one queued or running open of tp; q.mu held.
func (q *openQueue) done(tp topicPartition) {
	if q.pending[tp]--; q.pending[tp] <= 0 {
		delete(q.pending, tp)
	}
	if q.byTopic[tp.topic]--; q.byTopic[tp.topic] <= 0 {
		delete(q.byTopic, tp.topic)
	}
}

// signal wakes the waiters (WaitOpened, stopOpens); q.mu held.
func (q *openQueue) signal() {
	if q.changed != nil {
		close(q.changed)
		q.changed = nil
	}
}

func (m *Manager) opensAbandoned() bool {
	q := &m.opens
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.abandoned
}
