package verify

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Run is one verification run on a topic: its producers, and every
// acknowledgement they got.
type Run struct {
	ID    string // written into every value; records of other runs are ignored
	Topic string
	// Size is the size values are padded to (at least the header); set it
	// before producing.
	Size int
	// Logf, when set, gets the details behind the counts (which record was
	// read twice, where); nil drops them.
	Logf func(format string, args ...any)

	mu       sync.Mutex
	acked    map[ID]Ack
	failures map[string]int // produce errors by message
	nextProd int

	ackCount  atomic.Int64
	failCount atomic.Int64
	sent      atomic.Int64
}

// NewRun starts a run on topic with a fresh run id.
func NewRun(topic string) *Run {
	return &Run{ID: NewRunID(), Topic: topic, Size: 100, acked: map[ID]Ack{}, failures: map[string]int{}}
}

func (r *Run) logf(format string, args ...any) {
	if r.Logf != nil {
		r.Logf(format, args...)
	}
}

// Acked is the number of acknowledged records so far.
func (r *Run) Acked() int64 { return r.ackCount.Load() }

// Failed is the number of records whose produce failed so far.
func (r *Run) Failed() int64 { return r.failCount.Load() }

// Sent is the number of records handed to producers so far.
func (r *Run) Sent() int64 { return r.sent.Load() }

// WaitAcked waits until at least n records are acknowledged in all, or ctx
// ends.
func (r *Run) WaitAcked(ctx context.Context, n int64) error {
	for r.Acked() < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d records acknowledged: %w; produce errors: %v", r.Acked(), n, ctx.Err(), r.Failures())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// Failures returns the produce errors so far, by message (at most 50
// distinct messages are kept).
func (r *Run) Failures() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.failures)
}

// Acks returns a copy of every acknowledgement.
func (r *Run) Acks() map[ID]Ack {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.acked)
}

// Value is the value of id in this run (key is the record's key, part of
// the checksum).
func (r *Run) Value(id ID, key []byte) []byte { return Value(r.ID, id, key, r.Size) }

// Parse decodes a record of this run.
func (r *Run) Parse(key, value []byte) (ID, Status) { return Parse(r.ID, key, value) }

// Ack records that id was acknowledged at partition/offset.
func (r *Run) Ack(id ID, partition int32, offset int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.acked[id]; !ok {
		r.ackCount.Add(1)
	}
	r.acked[id] = Ack{partition, offset}
}

// Fail records that producing id failed with err: it is not acknowledged.
func (r *Run) Fail(id ID, err error) {
	r.failCount.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := err.Error()
	if len(r.failures) < 50 || r.failures[msg] > 0 {
		r.failures[msg]++
	}
}

// ProducerConfig says what a Producer writes.
type ProducerConfig struct {
	// Rate is about how many records per second (0: as fast as the
	// client's buffer allows).
	Rate int
	// Records stops the producer after this many records (0: until Stop).
	Records int64
	// Keys, when positive, gives records the key "k<seq mod Keys>", so the
	// client's partitioner spreads them by key.
	Keys int
	// NoOffsets: the producer learns no offsets (acks=0); acknowledgements
	// are kept with offset NoOffset and offsets are not checked.
	NoOffsets bool
	// TxnRecords, when positive, writes in transactions of this many
	// records (the client needs a TransactionalID): records count as
	// acknowledged only once their transaction committed.
	TxnRecords int
}

// Producer writes records of a run to its topic until Stop or its record
// count.
type Producer struct {
	r        *Run
	id       int
	cl       *kgo.Client
	cfg      ProducerConfig
	stop     atomic.Bool
	ctx      context.Context // canceled by Stop: unblocks a Produce waiting for buffer space
	cancel   context.CancelFunc
	done     chan struct{}
	seq      int64
	stopOnce sync.Once
	err      error // the transaction error that ended a transactional producer
}

// StartProducer produces with cl (configured by the caller: acks,
// idempotence, timeouts) as cfg says. Every acknowledgement is recorded.
// The producer owns cl: Stop closes it.
func (r *Run) StartProducer(cl *kgo.Client, cfg ProducerConfig) *Producer {
	r.mu.Lock()
	p := &Producer{r: r, id: r.nextProd, cl: cl, cfg: cfg, done: make(chan struct{})}
	r.nextProd++
	r.mu.Unlock()
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if cfg.TxnRecords > 0 {
		go p.txnLoop()
	} else {
		go p.loop()
	}
	return p
}

// Done is closed when the producer has handed out all its records (or was
// paused); their answers may still be outstanding.
func (p *Producer) Done() <-chan struct{} { return p.done }

// Err is the error that ended a transactional producer early, if any.
func (p *Producer) Err() error {
	<-p.done
	return p.err
}

func (p *Producer) record() (ID, *kgo.Record) {
	id := ID{p.id, p.seq}
	p.seq++
	rec := &kgo.Record{Topic: p.r.Topic}
	if p.cfg.Keys > 0 {
		rec.Key = []byte("k" + strconv.FormatInt(id.Seq%int64(p.cfg.Keys), 10))
	}
	rec.Value = p.r.Value(id, rec.Key)
	p.r.sent.Add(1)
	return id, rec
}

// pacer spreads records over time: next returns how many to send now,
// sleeping until they are due when a rate is set.
type pacer struct {
	rate  int
	start time.Time
	sent  int64
}

func (pc *pacer) next() int {
	if pc.rate <= 0 {
		return 100
	}
	if pc.start.IsZero() {
		pc.start = time.Now()
	}
	for {
		due := int64(time.Since(pc.start).Seconds() * float64(pc.rate))
		if n := due - pc.sent; n > 0 {
			n = min(n, int64(max(1, pc.rate/100)))
			pc.sent += n
			return int(n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (p *Producer) more() bool {
	return !p.stop.Load() && (p.cfg.Records <= 0 || p.seq < p.cfg.Records)
}

func (p *Producer) loop() {
	defer close(p.done)
	pc := pacer{rate: p.cfg.Rate}
	for p.more() {
		for n := pc.next(); n > 0 && p.more(); n-- {
			id, rec := p.record()
			// Once Stop cancels ctx, a record still waiting for buffer
			// space or not yet sent fails: it counts as unacknowledged.
			p.cl.Produce(p.ctx, rec, func(rec *kgo.Record, err error) { p.result(id, rec, err) })
		}
	}
}

func (p *Producer) result(id ID, rec *kgo.Record, err error) {
	if err != nil {
		p.r.Fail(id, err)
		return
	}
	off := rec.Offset
	if p.cfg.NoOffsets {
		off = NoOffset
	}
	p.r.Ack(id, rec.Partition, off)
}

// txnLoop writes transactions of TxnRecords records: begin, produce,
// flush, commit. A record is acknowledged when its transaction committed;
// a failed commit aborts, and those records must never be read.
func (p *Producer) txnLoop() {
	defer close(p.done)
	pc := pacer{rate: p.cfg.Rate}
	for p.more() {
		if err := p.cl.BeginTransaction(); err != nil {
			p.err = fmt.Errorf("begin transaction: %w", err)
			return
		}
		type sent struct {
			id  ID
			ack Ack
			err error
		}
		var (
			mu  sync.Mutex
			txn []*sent
		)
		for k := 0; k < p.cfg.TxnRecords && p.more(); {
			for n := pc.next(); n > 0 && k < p.cfg.TxnRecords && p.more(); n-- {
				id, rec := p.record()
				s := &sent{id: id}
				mu.Lock()
				txn = append(txn, s)
				mu.Unlock()
				p.cl.Produce(p.ctx, rec, func(rec *kgo.Record, err error) {
					mu.Lock()
					defer mu.Unlock()
					s.ack, s.err = Ack{rec.Partition, rec.Offset}, err
				})
				k++
			}
		}
		flushErr := p.cl.Flush(p.ctx)
		commit := kgo.TryCommit
		mu.Lock()
		for _, s := range txn {
			if s.err != nil {
				commit = kgo.TryAbort
			}
		}
		mu.Unlock()
		if flushErr != nil {
			commit = kgo.TryAbort
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := p.cl.EndTransaction(ctx, commit)
		cancel()
		mu.Lock()
		for _, s := range txn {
			switch {
			case commit == kgo.TryCommit && err == nil:
				p.r.Ack(s.id, s.ack.Partition, s.ack.Offset)
			case s.err != nil:
				p.r.Fail(s.id, s.err)
			case err != nil:
				p.r.Fail(s.id, fmt.Errorf("end transaction: %w", err))
			default:
				p.r.Fail(s.id, fmt.Errorf("transaction aborted (another record of it failed)"))
			}
		}
		mu.Unlock()
		if err != nil {
			p.err = fmt.Errorf("end transaction: %w", err)
			return
		}
	}
}

// Pause stops adding records and returns once the loop has ended; records
// waiting for buffer space fail. Stop still has to be called.
func (p *Producer) Pause() {
	p.stop.Store(true)
	p.cancel()
	<-p.done
}

// Stop ends the producer: no new records, then up to flush for those in
// flight to be answered. Records not answered (or never sent) fail and
// count as unacknowledged. Then the client is closed.
func (p *Producer) Stop(flush time.Duration) {
	p.stopOnce.Do(func() {
		if flush > 0 && p.cfg.Records > 0 {
			// A producer with a record count first finishes its records,
			// and waits for their answers.
			ctx, cancel := context.WithTimeout(context.Background(), flush)
			select {
			case <-p.done:
			case <-ctx.Done():
			}
			p.cl.Flush(ctx)
			cancel()
		}
		p.Pause()
		if flush > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), flush)
			p.cl.Flush(ctx)
			cancel()
		}
		p.cl.Close()
	})
}
