package verify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// CheckOptions say how Check reads the topic back.
type CheckOptions struct {
	Seeds []string
	// Topic is the topic to read (default: the run's): records a
	// consume-transform-produce pipeline copied elsewhere.
	Topic string
	// Opts are extra client options (TLS, SASL, ...).
	Opts []kgo.Opt
	// From is where to start reading each partition; a partition not in it
	// (or a nil map) is read from its log start.
	From map[int32]int64
	// ReadCommitted reads with isolation.level=read_committed, up to the
	// last stable offsets: records of aborted transactions are not
	// returned.
	ReadCommitted bool
	// Progress, when set, is called now and then with the records read and
	// the records to read.
	Progress func(read, total int64)
	// Tally, when set, receives the records (and its NoOffsets applies);
	// otherwise Check uses a fresh one.
	Tally *Tally
	// CommitWait is how long to wait for the end offsets to pass every
	// acknowledged offset (default 3 s; negative: do not wait).
	CommitWait time.Duration
	// StallTimeout, when positive, ends the read once no partition has
	// moved for that long: what is left unread counts as lost (records a
	// client cannot read, e.g. behind a corrupt batch it refuses forever).
	// Zero reads until ctx ends.
	StallTimeout time.Duration
}

// EndOffsets lists the end offsets of every partition of topic (the high
// watermarks, or the last stable offsets with readCommitted), retrying
// while a partition has no leader (right after a fault) until ctx ends.
func EndOffsets(ctx context.Context, cl *kgo.Client, topic string, readCommitted bool) (map[int32]int64, error) {
	adm := kadm.NewClient(cl)
	for {
		var ends kadm.ListedOffsets
		var err error
		if readCommitted {
			ends, err = adm.ListCommittedOffsets(ctx, topic)
		} else {
			ends, err = adm.ListEndOffsets(ctx, topic)
		}
		if err == nil {
			err = ends.Error()
		}
		if err == nil && len(ends[topic]) == 0 {
			err = fmt.Errorf("topic %s has no partitions", topic)
		}
		if err == nil {
			out := map[int32]int64{}
			ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list offsets of %s: %w (last error: %v)", topic, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func startOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	adm := kadm.NewClient(cl)
	for {
		starts, err := adm.ListStartOffsets(ctx, topic)
		if err == nil {
			err = starts.Error()
		}
		if err == nil {
			out := map[int32]int64{}
			starts.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list start offsets of %s: %w (last error: %v)", topic, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Check reads the run's topic with a fresh client, from opts.From (or the
// log start) up to the end offsets at the time of the call, and compares
// it with the acknowledgements. Stop every producer first.
func (r *Run) Check(ctx context.Context, opts CheckOptions) (Report, error) {
	topic := opts.Topic
	if topic == "" {
		topic = r.Topic
	}
	seeds := kgo.SeedBrokers(opts.Seeds...)
	acl, err := kgo.NewClient(append([]kgo.Opt{seeds}, opts.Opts...)...)
	if err != nil {
		return Report{}, err
	}
	starts, err := startOffsets(ctx, acl, topic)
	var end map[int32]int64
	if err == nil {
		end, err = r.committedEnds(ctx, acl, topic, opts)
	}
	acl.Close()
	if err != nil {
		return Report{}, err
	}
	t := opts.Tally
	if t == nil {
		t = r.NewTally()
	}
	from := map[int32]kgo.Offset{}
	pos := map[int32]int64{}
	var total int64
	for p, e := range end {
		s := starts[p]
		if f, ok := opts.From[p]; ok && f > s {
			s = f
		}
		if e > s {
			from[p] = kgo.NewOffset().At(s)
			pos[p] = s
			total += e - s
		}
	}
	if len(from) > 0 {
		iso := kgo.ReadUncommitted()
		if opts.ReadCommitted {
			iso = kgo.ReadCommitted()
		}
		cl, err := kgo.NewClient(append([]kgo.Opt{seeds, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
			// Control batches (transaction markers) are kept so that every
			// offset up to the end is seen.
			kgo.KeepControlRecords(), kgo.FetchIsolationLevel(iso), kgo.FetchMaxWait(500 * time.Millisecond)}, opts.Opts...)...)
		if err != nil {
			return Report{}, err
		}
		defer cl.Close()
		var read int64
		moved := time.Now()
		for len(from) > 0 {
			pctx, cancel := ctx, context.CancelFunc(func() {})
			if opts.StallTimeout > 0 {
				pctx, cancel = context.WithTimeout(ctx, time.Second)
			}
			fs := cl.PollFetches(pctx)
			cancel()
			if ctx.Err() != nil {
				return Report{}, fmt.Errorf("reading %s back: %w (partition positions %v, ends %v)", topic, ctx.Err(), pos, end)
			}
			before := read
			fs.EachError(func(_ string, p int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					r.logf("verify: fetch partition %d: %v", p, err)
				}
			})
			fs.EachRecord(func(rec *kgo.Record) {
				p := rec.Partition
				if _, reading := from[p]; !reading || rec.Offset >= end[p] {
					return
				}
				// Records of aborted transactions are skipped by a
				// read_committed client: count the gap as read.
				read += rec.Offset + 1 - pos[p]
				pos[p] = rec.Offset + 1
				if rec.Offset+1 >= end[p] {
					delete(from, p)
				}
				t.Observe(rec)
			})
			if opts.Progress != nil {
				opts.Progress(read, total)
			}
			if read != before {
				moved = time.Now()
			} else if opts.StallTimeout > 0 && time.Since(moved) > opts.StallTimeout {
				r.logf("verify: nothing read for %v at positions %v (ends %v): the rest counts as lost", opts.StallTimeout, pos, end)
				break
			}
		}
	}
	return t.Report(r.Acks()), nil
}

// committedEnds lists the end offsets to read to. An acknowledgement can
// come before its record is committed (acks=1 answers once the leader has
// it): while a partition's end is not yet past the highest offset
// acknowledged in it, the ends are listed again, for up to
// opts.CommitWait. What is still beyond the end then is not committed,
// and counts as lost if it is not read.
func (r *Run) committedEnds(ctx context.Context, cl *kgo.Client, topic string, opts CheckOptions) (map[int32]int64, error) {
	wait := opts.CommitWait
	if wait == 0 {
		wait = 3 * time.Second
	}
	want := map[int32]int64{}
	if topic == r.Topic {
		for _, a := range r.Acks() {
			want[a.Partition] = max(want[a.Partition], a.Offset+1)
		}
	}
	deadline := time.Now().Add(wait)
	for {
		end, err := EndOffsets(ctx, cl, topic, opts.ReadCommitted)
		if err != nil {
			return nil, err
		}
		behind := false
		for p, w := range want {
			behind = behind || end[p] < w
		}
		if !behind || time.Now().After(deadline) {
			return end, nil
		}
		select {
		case <-ctx.Done():
			return end, nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// GroupConsumer reads the run's topic in a consumer group, committing
// what it has read after each poll (at least once: a record may be read
// again after a rebalance or restart, an acknowledged one must not be
// missed).
type GroupConsumer struct {
	r    *Run
	cl   *kgo.Client
	t    *Tally
	mu   sync.Mutex
	errs map[string]int
	pos  map[int32]int64 // next offset to read, per partition
	stop context.CancelFunc
	done chan struct{}
	once sync.Once
}

// StartGroupConsumer polls with cl, which must be configured with a
// consumer group on the run's topic, and counts what it reads in t (nil:
// a new Tally); with commit, it commits each poll's
// offsets once the records are counted (cl should then have
// kgo.DisableAutoCommit). For WaitOffsets on a log with transactions, cl
// must keep control records (kgo.KeepControlRecords): a commit marker is
// the last offset of a partition. The consumer owns cl.
func (r *Run) StartGroupConsumer(cl *kgo.Client, commit bool, t *Tally) *GroupConsumer {
	if t == nil {
		t = r.NewTally()
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &GroupConsumer{r: r, cl: cl, t: t, errs: map[string]int{}, pos: map[int32]int64{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			g.mu.Lock()
			fs.EachError(func(_ string, _ int32, err error) {
				if ctx.Err() == nil && len(g.errs) < 50 {
					g.errs[err.Error()]++
				}
			})
			fs.EachRecord(func(rec *kgo.Record) {
				g.t.Observe(rec)
				g.pos[rec.Partition] = max(g.pos[rec.Partition], rec.Offset+1)
			})
			g.mu.Unlock()
			if commit && ctx.Err() == nil {
				if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
					g.mu.Lock()
					if len(g.errs) < 50 {
						g.errs["commit: "+err.Error()]++
					}
					g.mu.Unlock()
				}
			}
		}
	}()
	return g
}

// Tally is what the group has read so far.
func (g *GroupConsumer) Tally() *Tally { return g.t }

// WaitAll waits until the group has read every acknowledged record or ctx
// ends, and returns how many it has not read and a sample of them.
func (g *GroupConsumer) WaitAll(ctx context.Context) (missing int, sample []string) {
	for {
		missing, sample = g.t.Missing(g.r.Acks())
		if missing == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitOffsets waits until the group has read every partition up to end
// (offsets as EndOffsets returns them) or ctx ends.
func (g *GroupConsumer) WaitOffsets(ctx context.Context, end map[int32]int64, progress func(read, total int64)) error {
	for {
		g.mu.Lock()
		behind := 0
		var left int64
		for p, e := range end {
			if g.pos[p] < e {
				behind++
				left += e - g.pos[p]
			}
		}
		g.mu.Unlock()
		if progress != nil {
			progress(int64(g.t.Seen()), int64(g.t.Seen())+left)
		}
		if behind == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group read: %d partitions not read to their end: %w; errors: %v", behind, ctx.Err(), g.Errors())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Errors returns the fetch and commit errors the group consumer saw.
func (g *GroupConsumer) Errors() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	for k, v := range g.errs {
		out[k] = v
	}
	return out
}

// Stop ends the consumer and closes its client (leaving the group).
func (g *GroupConsumer) Stop() {
	g.once.Do(func() {
		g.stop()
		<-g.done
		g.cl.Close()
	})
}
