package broker

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

// pollLog stands for what a fetch reads: a count of bytes and a channel
// closed (and replaced) by every produce, as a partition's high-watermark
// channel is (partition.Notify). Each read is a response that counts its
// release, as a response holding segment files does.
type pollLog struct {
	mu        sync.Mutex
	bytes     int
	ch        chan struct{}
	reads     int
	released  int
	lastSent  *wire.Spliced
	noWaiting bool // reads offer nothing to wait on (every partition answered an error)
}

func newPollLog() *pollLog { return &pollLog{ch: make(chan struct{})} }

func (l *pollLog) produce(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bytes += n
	close(l.ch)
	l.ch = make(chan struct{})
}

// read is fetchOnce's part for fetchLongPoll: the response, whether it
// goes now (fetchOnce's rule: MinBytes reached and something read, or no
// MinBytes), and the channels to wait on.
func (l *pollLog) read(minBytes int) func() (kmsg.Response, bool, []<-chan struct{}) {
	return func() (kmsg.Response, bool, []<-chan struct{}) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.reads++
		resp := &kmsg.FetchResponse{Topics: []kmsg.FetchResponseTopic{{Topic: "t", Partitions: []kmsg.FetchResponseTopicPartition{{HighWatermark: int64(l.bytes)}}}}}
		out := &wire.Spliced{Response: resp}
		out.Release = func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.released++
		}
		l.lastSent = out
		var notify []<-chan struct{}
		if !l.noWaiting {
			notify = []<-chan struct{}{l.ch}
		}
		return out, l.bytes >= minBytes && l.bytes > 0 || minBytes <= 0, notify
	}
}

func (l *pollLog) counts() (reads, released int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads, l.released
}

// answered is the high watermark an answer of fetchLongPoll carries, and
// whether it is the last read (the one sent, not released).
func (l *pollLog) answered(t *testing.T, out kmsg.Response) int64 {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	sp, ok := out.(*wire.Spliced)
	if !ok || sp != l.lastSent {
		t.Fatalf("answer %T %p: want the last read %p", out, out, l.lastSent)
	}
	return fetchResponseOf(out).Topics[0].Partitions[0].HighWatermark
}

// polling runs fetchLongPoll in its own goroutine of the bubble.
type polling struct {
	done  chan struct{}
	out   kmsg.Response
	start time.Time
	took  time.Duration
}

func startPoll(ctx context.Context, wait time.Duration, read func() (kmsg.Response, bool, []<-chan struct{})) *polling {
	p := &polling{done: make(chan struct{}), start: time.Now()}
	go func() {
		defer close(p.done)
		p.out = fetchLongPoll(ctx, wait, read)
		p.took = time.Since(p.start)
	}()
	return p
}

func (p *polling) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// TestFetchLongPollOnTheBubblesClock: the fetch long-poll shell
// (fetchLongPoll, MaxWaitMillis and MinBytes) in a synctest bubble, on
// fake time: it waits until a produce brings MinBytes, then answers at
// once; a produce below MinBytes wakes it to read again and wait on;
// without enough data it answers with what there is exactly at MaxWait;
// a closed connection ends it with nothing to write; and every read not
// sent is released (its segment files) while the one sent is not. No real
// time passes and nothing sleeps.
func TestFetchLongPollOnTheBubblesClock(t *testing.T) {
	const wait = 500 * time.Millisecond
	t.Run("woken by a produce at MinBytes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newPollLog()
			p := startPoll(t.Context(), wait, l.read(100))
			synctest.Wait()
			if p.finished() {
				t.Fatal("answered an empty log at once, MinBytes 100")
			}
			l.produce(40) // below MinBytes: read again, wait on
			synctest.Wait()
			if reads, released := l.counts(); p.finished() || reads != 2 || released != 2 {
				t.Fatalf("after a produce below MinBytes: answered %v, %d reads, %d released; want waiting, 2 reads, both released", p.finished(), reads, released)
			}
			l.produce(60) // MinBytes reached
			<-p.done
			if hw := l.answered(t, p.out); hw != 100 || p.took != 0 {
				t.Fatalf("answered high watermark %d after %v; want 100 at once (no time passing)", hw, p.took)
			}
			if reads, released := l.counts(); reads != 3 || released != 2 {
				t.Fatalf("%d reads, %d released; want 3 reads, the 2 not sent released", reads, released)
			}
		})
	})
	t.Run("MaxWait without MinBytes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newPollLog()
			p := startPoll(t.Context(), wait, l.read(100))
			synctest.Wait()
			l.produce(40) // wakes it, not enough
			synctest.Wait()
			time.Sleep(wait / 2) // bubble time: halfway through MaxWait
			l.produce(10)
			<-p.done
			if hw := l.answered(t, p.out); hw != 50 || p.took != wait {
				t.Fatalf("answered high watermark %d after %v; want 50 (what there is) at MaxWait %v, counted from the first read", hw, p.took, wait)
			}
			if reads, released := l.counts(); reads != 4 || released != 3 {
				t.Fatalf("%d reads, %d released; want 4 reads (the first, two wakes, the last), 3 released", reads, released)
			}
		})
	})
	t.Run("connection closed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newPollLog()
			ctx, cancel := context.WithCancel(t.Context())
			p := startPoll(ctx, wait, l.read(100))
			synctest.Wait()
			cancel()
			<-p.done
			if p.out != nil || p.took != 0 {
				t.Fatalf("answered %v after %v; want nothing to write, at once", p.out, p.took)
			}
			if reads, released := l.counts(); reads != 1 || released != 1 {
				t.Fatalf("%d reads, %d released; want the one read released", reads, released)
			}
		})
	})
	t.Run("answers at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			for _, c := range []struct {
				name     string
				wait     time.Duration
				minBytes int
				data     int
				noWait   bool
			}{
				{name: "MinBytes already there", wait: wait, minBytes: 10, data: 10},
				{name: "MaxWait 0", wait: 0, minBytes: 10},
				{name: "MinBytes 0", wait: wait, minBytes: 0},
				{name: "nothing to wait on", wait: wait, minBytes: 10, noWait: true},
			} {
				l := newPollLog()
				l.noWaiting = c.noWait
				if c.data > 0 {
					l.produce(c.data)
				}
				start := time.Now()
				out := fetchLongPoll(t.Context(), c.wait, l.read(c.minBytes))
				hw := l.answered(t, out)
				if reads, released := l.counts(); hw != int64(c.data) || time.Since(start) != 0 || reads != 1 || released != 0 {
					t.Errorf("%s: high watermark %d after %v, %d reads, %d released; want %d at once from one read, not released",
						c.name, hw, time.Since(start), reads, released, c.data)
				}
			}
		})
	})
}
