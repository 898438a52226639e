package faulttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ID names one record: the producer that wrote it and its sequence in that
// producer's stream.
type ID struct {
	Producer int
	Seq      int64
}

func (id ID) String() string { return fmt.Sprintf("p%d/%d", id.Producer, id.Seq) }

// Ack is where the broker said a record went.
type Ack struct {
	Partition int32
	Offset    int64
}

// Checker records every acknowledged record of a run and, at the end, reads
// the topic back and reports what is missing, doubled or out of order.
type Checker struct {
	t     testing.TB
	run   string
	topic string

	mu       sync.Mutex
	acked    map[ID]Ack
	failures map[string]int // produce errors by message
	nextProd int

	ackCount atomic.Int64

	// Pad is the size records are padded to; set it before producing.
	Pad int
}

// NewChecker starts a run on topic; records of other runs in the topic are
// ignored.
func NewChecker(t testing.TB, topic string) *Checker {
	var b [6]byte
	rand.Read(b[:])
	return &Checker{t: t, run: hex.EncodeToString(b[:]), topic: topic, acked: map[ID]Ack{}, failures: map[string]int{}, Pad: 100}
}

// Acked is the number of acknowledged records so far.
func (c *Checker) Acked() int64 { return c.ackCount.Load() }

// WaitAcked waits until at least n more records than now are acknowledged,
// and fails the test if that takes longer than timeout: the cluster did
// not recover.
func (c *Checker) WaitAcked(n int64, timeout time.Duration, what string) {
	c.t.Helper()
	want := c.Acked() + n
	deadline := time.Now().Add(timeout)
	for c.Acked() < want {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: only %d of %d acknowledgements after %v; produce errors: %v", what, c.Acked(), want, timeout, c.Failures())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Failures returns produce errors seen so far, by message.
func (c *Checker) Failures() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.failures))
	for k, v := range c.failures {
		m[k] = v
	}
	return m
}

func (c *Checker) value(id ID) []byte {
	// hf|run|producer|seq| then padding, so batches have a real size.
	s := fmt.Sprintf("hf|%s|%d|%d|", c.run, id.Producer, id.Seq)
	return []byte(s + strings.Repeat(".", max(0, c.Pad-len(s))))
}

func (c *Checker) parse(v []byte) (ID, bool) {
	f := strings.SplitN(string(v), "|", 5)
	if len(f) < 5 || f[0] != "hf" || f[1] != c.run {
		return ID{}, false
	}
	p, err1 := strconv.Atoi(f[2])
	s, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return ID{}, false
	}
	return ID{p, s}, true
}

// Producer writes records to the checker's topic without pause until Stop.
type Producer struct {
	c        *Checker
	id       int
	cl       *kgo.Client
	stop     atomic.Bool
	ctx      context.Context // canceled by Stop: unblocks a Produce waiting for buffer space
	cancel   context.CancelFunc
	done     chan struct{}
	seq      int64
	stopOnce sync.Once
}

// StartProducer produces with cl (configured by the caller: acks,
// idempotence, timeouts) at about rate records per second (0: as fast as
// the client's buffer allows). Every acknowledgement is recorded. The
// producer owns cl: Stop, or the end of the test, closes it.
func (c *Checker) StartProducer(cl *kgo.Client, rate int) *Producer {
	c.mu.Lock()
	p := &Producer{c: c, id: c.nextProd, cl: cl, done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	c.nextProd++
	c.mu.Unlock()
	go p.loop(rate)
	c.t.Cleanup(func() { p.Stop(0) })
	return p
}

func (p *Producer) loop(rate int) {
	defer close(p.done)
	const tick = 10 * time.Millisecond
	per := rate / int(time.Second/tick)
	if rate > 0 && per == 0 {
		per = 1
	}
	for !p.stop.Load() {
		n := per
		if rate <= 0 {
			n = 100
		}
		for range n {
			id := ID{p.id, p.seq}
			p.seq++
			r := &kgo.Record{Topic: p.c.topic, Value: p.c.value(id)}
			// Once Stop cancels ctx, a record still waiting for buffer
			// space or not yet sent fails: it counts as unacknowledged.
			p.cl.Produce(p.ctx, r, func(r *kgo.Record, err error) { p.c.result(id, r, err) })
		}
		if rate > 0 {
			time.Sleep(tick)
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

func (c *Checker) result(id ID, r *kgo.Record, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		msg := err.Error()
		if len(c.failures) < 50 || c.failures[msg] > 0 {
			c.failures[msg]++
		}
		return
	}
	c.acked[id] = Ack{r.Partition, r.Offset}
	c.ackCount.Add(1)
}

// Stop ends the producer: no new records, then up to flush for those in
// flight to be answered. Records not answered (or never sent) fail and
// count as unacknowledged.
func (p *Producer) Stop(flush time.Duration) {
	p.stopOnce.Do(func() {
		p.Pause()
		if flush > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), flush)
			p.cl.Flush(ctx)
			cancel()
		}
		p.cl.Close()
	})
}

// Result is the outcome of a check.
type Result struct {
	Acked          int // acknowledged records
	Seen           int // distinct records of the run read back
	Lost           int // acknowledged, not read back
	Dup            int // read back more than once
	Reordered      int // read after a later record of the same producer, in one partition
	OffsetMismatch int // read back at another partition/offset than acknowledged
	OffsetConflict int // two records acknowledged at the same partition and offset
	Unacked        int // read back but never acknowledged (allowed: the answer was lost)
	BadAck         int // acknowledged as a success without an offset: no stored record is named
	Foreign        int // records not of this run (ignored)
	LostSample     []string
}

// OK is the only pass: nothing lost, doubled, reordered or misplaced.
func (r Result) OK() bool {
	return r.Lost == 0 && r.Dup == 0 && r.Reordered == 0 && r.OffsetMismatch == 0 && r.OffsetConflict == 0 && r.BadAck == 0
}

func (r Result) String() string {
	s := fmt.Sprintf("acked=%d seen=%d lost=%d dup=%d reordered=%d offset_mismatch=%d offset_conflict=%d bad_ack=%d unacked_seen=%d foreign=%d",
		r.Acked, r.Seen, r.Lost, r.Dup, r.Reordered, r.OffsetMismatch, r.OffsetConflict, r.BadAck, r.Unacked, r.Foreign)
	if len(r.LostSample) > 0 {
		s += " lost_sample=" + strings.Join(r.LostSample, ",")
	}
	return s
}

// Acks returns a copy of every acknowledgement.
func (c *Checker) Acks() map[ID]Ack {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[ID]Ack, len(c.acked))
	for k, v := range c.acked {
		m[k] = v
	}
	return m
}

// Check reads the whole topic with a fresh client seeded from bootstrap,
// from the log start up to the high watermarks at the time of the call, and
// compares it with the acknowledgements. Stop every producer first.
func (c *Checker) Check(bootstrap string, timeout time.Duration) (Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	seeds := kgo.SeedBrokers(strings.Split(bootstrap, ",")...)
	acl, err := kgo.NewClient(seeds)
	if err != nil {
		return Result{}, err
	}
	adm := kadm.NewClient(acl)
	var starts, ends kadm.ListedOffsets
	for {
		// Right after a fault a partition may have no leader yet; retry
		// until every partition answers.
		starts, err = adm.ListStartOffsets(ctx, c.topic)
		if err == nil {
			err = starts.Error()
		}
		if err == nil {
			ends, err = adm.ListEndOffsets(ctx, c.topic)
			if err == nil {
				err = ends.Error()
			}
		}
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	acl.Close()
	if err != nil {
		return Result{}, fmt.Errorf("list offsets: %w", err)
	}
	from := map[int32]kgo.Offset{}
	end := map[int32]int64{}
	remaining := 0
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(c.topic, o.Partition)
		end[o.Partition] = o.Offset
		if o.Offset > s.Offset {
			from[o.Partition] = kgo.NewOffset().At(s.Offset)
			remaining++
		}
	})
	type sighting struct {
		ack Ack
		n   int
	}
	seen := map[ID]*sighting{}
	var res Result
	lastSeq := map[[2]int]int64{} // (partition, producer) -> last seq read, in offset order
	if remaining > 0 {
		cl, err := kgo.NewClient(seeds, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.topic: from}),
			// Control batches (transaction markers) are kept so that every
			// offset up to the end is seen.
			kgo.KeepControlRecords(), kgo.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			return Result{}, err
		}
		defer cl.Close()
		pos := map[int32]int64{}
		for p, o := range from {
			pos[p] = o.EpochOffset().Offset
		}
		done := map[int32]bool{}
		for remaining > 0 {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return Result{}, fmt.Errorf("reading %s back: %w (partition positions %v, ends %v)", c.topic, ctx.Err(), pos, end)
			}
			fs.EachError(func(_ string, p int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					c.t.Logf("check: fetch partition %d: %v", p, err)
				}
			})
			fs.EachRecord(func(r *kgo.Record) {
				if r.Offset >= end[r.Partition] || done[r.Partition] {
					return
				}
				pos[r.Partition] = r.Offset + 1
				if r.Offset+1 >= end[r.Partition] {
					done[r.Partition] = true
					remaining--
				}
				if r.Attrs.IsControl() {
					return // a transaction marker
				}
				id, ok := c.parse(r.Value)
				if !ok {
					res.Foreign++
					return
				}
				if s := seen[id]; s != nil {
					s.n++
					res.Dup++
					if res.Dup <= 10 {
						c.t.Logf("check: %v read at %d/%d and again at %d/%d", id, s.ack.Partition, s.ack.Offset, r.Partition, r.Offset)
					}
					return
				}
				seen[id] = &sighting{ack: Ack{r.Partition, r.Offset}, n: 1}
				k := [2]int{int(r.Partition), id.Producer}
				if last, ok := lastSeq[k]; ok && id.Seq < last {
					res.Reordered++
					if res.Reordered <= 10 {
						c.t.Logf("check: %v at %d/%d after seq %d", id, r.Partition, r.Offset, last)
					}
				} else {
					lastSeq[k] = id.Seq
				}
			})
		}
	}
	acks := c.Acks()
	res.Acked = len(acks)
	res.Seen = len(seen)
	at := map[Ack]ID{}
	var lost []ID
	for id, a := range acks {
		if a.Offset < 0 {
			res.BadAck++
			if res.BadAck <= 10 {
				c.t.Logf("check: %v acknowledged as a success at offset %d", id, a.Offset)
			}
		}
		if other, ok := at[a]; ok {
			res.OffsetConflict++
			c.t.Logf("check: %v and %v both acknowledged at %d/%d", id, other, a.Partition, a.Offset)
		}
		at[a] = id
		s := seen[id]
		switch {
		case s == nil:
			res.Lost++
			lost = append(lost, id)
		case s.ack != a:
			res.OffsetMismatch++
			if res.OffsetMismatch <= 10 {
				c.t.Logf("check: %v acknowledged at %d/%d, read at %d/%d", id, a.Partition, a.Offset, s.ack.Partition, s.ack.Offset)
			}
		}
	}
	for id := range seen {
		if _, ok := acks[id]; !ok {
			res.Unacked++
		}
	}
	sort.Slice(lost, func(i, j int) bool {
		if lost[i].Producer != lost[j].Producer {
			return lost[i].Producer < lost[j].Producer
		}
		return lost[i].Seq < lost[j].Seq
	})
	for _, id := range lost[:min(10, len(lost))] {
		a := acks[id]
		res.LostSample = append(res.LostSample, fmt.Sprintf("%v@%d/%d", id, a.Partition, a.Offset))
	}
	return res, nil
}

// RequireOK fails the test unless r passes.
func RequireOK(t testing.TB, r Result, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	t.Logf("check: %v", r)
	if !r.OK() {
		t.Fatalf("check failed: %v", r)
	}
	if r.Acked == 0 {
		t.Fatal("check: nothing was acknowledged, the test proved nothing")
	}
}

// GroupConsumer reads the checker's topic in a consumer group while the
// faults happen, committing as it goes (at-least-once: re-deliveries are
// allowed, a missed acknowledged record is not).
type GroupConsumer struct {
	c    *Checker
	cl   *kgo.Client
	mu   sync.Mutex
	seen map[ID]int
	errs map[string]int
	stop context.CancelFunc
	done chan struct{}
	once sync.Once
}

// StartGroupConsumer polls with cl, which must be configured with a
// consumer group on the checker's topic. The consumer owns cl.
func (c *Checker) StartGroupConsumer(cl *kgo.Client) *GroupConsumer {
	ctx, cancel := context.WithCancel(context.Background())
	g := &GroupConsumer{c: c, cl: cl, seen: map[ID]int{}, errs: map[string]int{}, stop: cancel, done: make(chan struct{})}
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
			fs.EachRecord(func(r *kgo.Record) {
				if id, ok := c.parse(r.Value); ok {
					g.seen[id]++
				}
			})
			g.mu.Unlock()
		}
	}()
	c.t.Cleanup(g.Stop)
	return g
}

// WaitAll waits up to timeout until the group has read every acknowledged
// record, and returns how many it has not, a sample of them, and how many
// records it read more than once.
func (g *GroupConsumer) WaitAll(timeout time.Duration) (missing int, sample []string, redelivered int) {
	acks := g.c.Acks()
	deadline := time.Now().Add(timeout)
	for {
		g.mu.Lock()
		missing, sample, redelivered = 0, nil, 0
		for id := range acks {
			if g.seen[id] == 0 {
				missing++
				if len(sample) < 10 {
					sample = append(sample, id.String())
				}
			}
		}
		for _, n := range g.seen {
			if n > 1 {
				redelivered++
			}
		}
		g.mu.Unlock()
		if missing == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Errors returns the fetch errors the group consumer saw.
func (g *GroupConsumer) Errors() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := map[string]int{}
	for k, v := range g.errs {
		m[k] = v
	}
	return m
}

// Stop ends the consumer and closes its client (leaving the group).
func (g *GroupConsumer) Stop() {
	g.once.Do(func() {
		g.stop()
		<-g.done
		g.cl.Close()
	})
}
