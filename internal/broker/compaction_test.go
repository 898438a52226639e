package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/metrics"
	"holdfast/internal/records"
	"holdfast/internal/testwait"
	"holdfast/internal/wire"
)

// fastCleaner makes the cleaner look for work every 50 ms.
func fastCleaner(c *broker.Config) {
	c.LogCleaner = broker.DefaultCleanerConfig()
	c.LogCleaner.Backoff = 50 * time.Millisecond
	c.LogCleaner.DedupeBufferSize = 8 << 20
}

// kvRec is a record as a consumer saw it.
type kvRec struct {
	off      int64
	key, val string
	null     bool
}

// changelog is what was written: the live view (last value of each key,
// deleted keys absent) and the offset of the last record.
type changelog struct {
	want map[string]string
	last int64
}

// writeChangelog produces n updates over keys keys with franz-go, one in
// twenty a delete (tombstone), in batches of many records.
func writeChangelog(t *testing.T, cl *kgo.Client, topic string, n, keys int, seed int64, cl0 *changelog) *changelog {
	return writeChangelogChunks(t, cl, topic, n, keys, seed, cl0, 5000)
}

// writeChangelogChunks is writeChangelog producing chunk records at a time
// (small chunks: many small batches, many of them emptied by the cleaner).
func writeChangelogChunks(t *testing.T, cl *kgo.Client, topic string, n, keys int, seed int64, cl0 *changelog, chunk int) *changelog {
	t.Helper()
	c := cl0
	if c == nil {
		c = &changelog{want: map[string]string{}, last: -1}
	}
	rng := rand.New(rand.NewSource(seed))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for from := 0; from < n; from += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for i := from; i < min(n, from+chunk); i++ {
			key := fmt.Sprintf("key-%04d", rng.Intn(keys))
			r := &kgo.Record{Topic: topic, Key: []byte(key)}
			if rng.Intn(20) == 0 {
				delete(c.want, key)
			} else {
				r.Value = []byte(fmt.Sprintf("value-%d-%d-padding-to-make-it-longer", seed, i))
				c.want[key] = string(r.Value)
			}
			recs = append(recs, r)
		}
		res := cl.ProduceSync(ctx, recs...)
		if err := res.FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		for _, r := range res {
			c.last = max(c.last, r.Record.Offset)
		}
	}
	return c
}

func liveView(recs []kvRec) map[string]string {
	m := map[string]string{}
	for _, r := range recs {
		if r.null {
			delete(m, r.key)
		} else {
			m[r.key] = r.val
		}
	}
	return m
}

// checkCompacted checks what a consumer read from the start: offsets only
// grow, the view is exactly want, and below cleanedBelow (the cleaner's
// progress) every key appears once, with no tombstone once they are past
// delete.retention.ms (tombstonesGone).
func checkCompacted(t *testing.T, who string, recs []kvRec, want map[string]string, cleanedBelow int64, tombstonesGone bool) {
	t.Helper()
	seen := map[string]int64{}
	prev := int64(-1)
	for _, r := range recs {
		if r.off <= prev {
			t.Fatalf("%s: offset %d after %d", who, r.off, prev)
		}
		prev = r.off
		if r.off >= cleanedBelow {
			continue
		}
		if o, dup := seen[r.key]; dup {
			t.Fatalf("%s: key %s at %d and %d, both in the cleaned section (below %d)", who, r.key, o, r.off, cleanedBelow)
		}
		seen[r.key] = r.off
		if r.null && tombstonesGone {
			t.Fatalf("%s: tombstone of %s at %d still there after delete.retention.ms", who, r.key, r.off)
		}
	}
	got := liveView(recs)
	if len(got) != len(want) {
		t.Fatalf("%s: %d live keys, want %d", who, len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: %s = %q, want %q", who, k, got[k], v)
		}
	}
}

// consumeFranz reads partition 0 from the start up to offset last.
func consumeFranz(t *testing.T, seeds []string, topic string, last int64, opts ...kgo.Opt) []kvRec {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []kvRec
	for len(out) == 0 || out[len(out)-1].off < last {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("franz-go: read up to %d of %d", len(out), last)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, kvRec{r.Offset, string(r.Key), string(r.Value), r.Value == nil})
		})
	}
	return out
}

func consumeSarama(t *testing.T, seeds []string, topic string, last int64) []kvRec {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	c, err := sarama.NewConsumer(seeds, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []kvRec
	for len(out) == 0 || out[len(out)-1].off < last {
		select {
		case m := <-pc.Messages():
			out = append(out, kvRec{m.Offset, string(m.Key), string(m.Value), m.Value == nil})
		case err := <-pc.Errors():
			t.Fatalf("sarama: %v", err)
		case <-ctx.Done():
			t.Fatalf("sarama: read %d records, not up to %d", len(out), last)
		}
	}
	return out
}

// consumeKafkaGo reads with segmentio/kafka-go's Reader, which hands
// control records to the application: those (4-byte control keys) are
// skipped here as an application would.
func consumeKafkaGo(t *testing.T, seeds []string, topic string, last int64) []kvRec {
	t.Helper()
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: seeds, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond, MaxBytes: 1 << 20})
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []kvRec
	for len(out) == 0 || out[len(out)-1].off < last {
		m, err := rd.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("kafka-go: after %d records: %v", len(out), err)
		}
		if len(m.Key) == 4 && m.Key[0] == 0 && m.Key[1] == 0 {
			continue // a control record
		}
		out = append(out, kvRec{m.Offset, string(m.Key), string(m.Value), m.Value == nil})
	}
	return out
}

// consumeKcat reads with librdkafka's kcat (-Z: NULL for a null value).
func consumeKcat(t *testing.T, seed, topic string) []kvRec {
	t.Helper()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("kcat not installed; .ci/run installs it with apt-get")
		}
		t.Log("kcat not installed: skipping its check")
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-b", seed, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-Z", "-f", "%o\t%k\t%s\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat: %v\n%s", err, stderr.String())
	}
	var out []kvRec
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3 {
			t.Fatalf("kcat line %q", sc.Text())
		}
		off, _ := strconv.ParseInt(f[0], 10, 64)
		out = append(out, kvRec{off, f[1], f[2], f[2] == "NULL"})
	}
	return out
}

// compactedEverywhere waits until the log of topic-0 on every node is
// cleaned up to its active segment and, if tombstonesGone, holds no
// tombstone there; it returns the lowest first dirty offset.
func compactedEverywhere(t *testing.T, nodes []*brokertest.Node, topic string, tombstonesGone bool) int64 {
	t.Helper()
	var low int64
	awaitCluster(t, "the log cleaned", func() error {
		low = -1
		for _, n := range nodes {
			l := n.B.PartitionLog(topic, 0)
			if l == nil {
				return fmt.Errorf("node %d: no log", n.Cfg.NodeID)
			}
			fd := l.FirstDirtyOffset()
			c, err := l.CleanableState(l.EndOffset(), math.MaxInt64)
			if err != nil {
				return err
			}
			if c.DirtyBytes > 0 || fd == 0 {
				return fmt.Errorf("node %d: %d dirty bytes, first dirty %d", n.Cfg.NodeID, c.DirtyBytes, fd)
			}
			if tombstonesGone {
				tomb := 0
				err := l.Scan(0, func(h records.Header, b []byte) error {
					if h.BaseOffset >= fd || h.IsControl() {
						return nil
					}
					return records.Each(b, func(r records.Record) {
						if r.Value == nil {
							tomb++
						}
					})
				})
				if err != nil {
					return err
				}
				if tomb > 0 {
					return fmt.Errorf("node %d: %d tombstones below %d", n.Cfg.NodeID, tomb, fd)
				}
			}
			if low < 0 || fd < low {
				low = fd
			}
		}
		return nil
	})
	return low
}

// TestCompactionChangelog: 100k updates over 1k keys plus deletes on a
// compacted topic; once the cleaner is through, franz-go, sarama,
// kafka-go and kcat reading from the start each see exactly the latest
// value of every live key, every key once in the cleaned section, and no
// deleted key; the same after a restart.
func TestCompactionChangelog(t *testing.T) {
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { fastCleaner(c) })
	const topic = "changelog"
	cfg := map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"), "segment.bytes": kadm.StringPtr("262144"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"), "delete.retention.ms": kadm.StringPtr("100"),
	}
	n.CreateTopic(topic, 1, cfg)
	cl := n.Client(kgo.ProducerLinger(5 * time.Millisecond))

	// A record without a key is refused, as Kafka does on a compacted topic.
	err := cl.ProduceSync(testCtx(t), &kgo.Record{Topic: topic, Value: []byte("no key")}).FirstErr()
	if !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("keyless record on a compacted topic: %v, want INVALID_RECORD", err)
	}

	log := writeChangelog(t, cl, topic, 100_000, 1000, 1, nil)
	size := n.B.PartitionLog(topic, 0).Size()
	cleaned := compactedEverywhere(t, []*brokertest.Node{n}, topic, true)
	after := n.B.PartitionLog(topic, 0).Size()
	t.Logf("log of %d bytes cleaned to %d bytes, first dirty offset %d of %d", size, after, cleaned, log.last+1)
	seeds := []string{n.Addr}
	checkCompacted(t, "franz-go", consumeFranz(t, seeds, topic, log.last), log.want, cleaned, true)
	checkCompacted(t, "sarama", consumeSarama(t, seeds, topic, log.last), log.want, cleaned, true)
	checkCompacted(t, "kafka-go", consumeKafkaGo(t, seeds, topic, log.last), log.want, cleaned, true)
	if recs := consumeKcat(t, n.Addr, topic); recs != nil {
		checkCompacted(t, "kcat", recs, log.want, cleaned, true)
	}

	reg := metrics.New(n.B, wire.NewServer(n.B, wire.Limits{}, nil))
	fam, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fam {
		for _, m := range f.GetMetric() {
			if c := m.GetCounter(); c != nil {
				got[f.GetName()] += c.GetValue()
			}
		}
	}
	if got["holdfast_log_cleaner_runs_total"] == 0 || got["holdfast_log_cleaner_reclaimed_bytes_total"] < float64(size-after)/2 || got["holdfast_log_cleaner_removed_tombstones_total"] == 0 {
		t.Fatalf("cleaner metrics %v", got)
	}

	n.Restart()
	checkCompacted(t, "franz-go after a restart", consumeFranz(t, seeds, topic, log.last), log.want, cleaned, true)
	// The idempotent producer carries on: its state was rebuilt from the
	// cleaned log (its last batch is kept for that).
	log = writeChangelog(t, cl, topic, 2000, 1000, 2, log)
	checkCompacted(t, "franz-go after more writes", consumeFranz(t, seeds, topic, log.last), log.want, cleaned, true)
}

// TestKafkaGoReadCompactedMessage is kafka-go's own
// TestReaderReadCompactedMessage against Holdfast: it creates its topic
// with segment.bytes=200, writes batches of 3 with duplicated keys, and
// reads until every key is there exactly once.
func TestKafkaGoReadCompactedMessage(t *testing.T) {
	// With Kafka's log.cleaner.min.cleanable.ratio of 0.5, what a first
	// pass leaves may never be cleaned again (as on Kafka); the test wants
	// the log fully cleaned, so the broker cleans any dirt.
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { fastCleaner(c); c.LogDefaults.MinCleanableRatio = 0 })
	const topic = "kafka-go-compacted"
	conn, err := kafka.Dial("tcp", n.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: 1, ReplicationFactor: 1, ConfigEntries: []kafka.ConfigEntry{
		{ConfigName: "cleanup.policy", ConfigValue: "compact"},
		{ConfigName: "segment.bytes", ConfigValue: "200"},
	}})
	if err != nil {
		t.Fatalf("kafka-go creating its compacted topic: %v", err)
	}
	var msgs []kafka.Message
	num := 0
	for i := 0; i < 5; i++ {
		for j := 0; j < 30; j++ {
			msgs = append(msgs, kafka.Message{Key: []byte(fmt.Sprintf("%04d", num)), Value: []byte(fmt.Sprintf("%04d", num))})
			num++
			for k := 0; k < i; k++ {
				msgs = append(msgs, kafka.Message{Key: []byte("dup_"), Value: []byte("dup_")})
			}
		}
	}
	for i := 0; i < 10; i++ {
		msgs = append(msgs, kafka.Message{Key: []byte(fmt.Sprintf("e-%02d", i)), Value: []byte(fmt.Sprintf("e-%02d", i))})
	}
	w := kafka.NewWriter(kafka.WriterConfig{Brokers: []string{n.Addr}, BatchSize: 3, Topic: topic, Balancer: &kafka.LeastBytes{}})
	if err := w.WriteMessages(testCtx(t), msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()
	want := map[string]int{}
	for _, m := range msgs {
		want[string(m.Key)] = 1
	}
	// kafka-go's test retries until the broker has compacted; here the
	// cleaner is awaited first, then one read must see every key once.
	compactedEverywhere(t, []*brokertest.Node{n}, topic, false)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	attempt := 0
	var keys map[string]int
	if !testwait.PollContext(ctx, 120*time.Second, func() bool {
		attempt++
		keys = func() map[string]int {
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{n.Addr}, Topic: topic, MinBytes: 200, MaxBytes: 200, MaxWait: 100 * time.Millisecond})
			defer r.Close()
			keys := map[string]int{}
			for len(keys) < len(want) {
				m, err := r.FetchMessage(ctx)
				if err != nil {
					t.Fatalf("kafka-go reading a compacted log: %v (%d keys read)", err, len(keys))
				}
				keys[string(m.Key)]++
			}
			return keys
		}()
		ok := len(keys) == len(want)
		for k, c := range keys {
			ok = ok && c == want[k]
		}
		return ok
	}) {
		t.Fatalf("keys never compacted: %v", keys)
	}
	t.Logf("every key once after %d reads", attempt)
}

// TestCompactionTransactions: committed and aborted transactions and
// plain writes on a compacted topic. read_committed sees the same before
// and after cleaning (and after a restart, whose replay must not find a
// transaction left open by what the cleaner removed); the aborted records
// are physically gone.
func TestCompactionTransactions(t *testing.T) {
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		fastCleaner(c)
		c.LogCleaner.Enable = false // turned on below, once the "before" view is taken
	})
	const topic = "txn-changelog"
	cfg := map[string]*string{"cleanup.policy": kadm.StringPtr("compact"), "segment.bytes": kadm.StringPtr("16384"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"), "delete.retention.ms": kadm.StringPtr("100")}
	n.CreateTopic(topic, 1, cfg)
	tx := n.Client(kgo.TransactionalID("compactor"), kgo.DefaultProduceTopic(topic))
	plain := n.Client(kgo.DefaultProduceTopic(topic))
	ctx := testCtx(t)
	rng := rand.New(rand.NewSource(2))
	var last int64
	abortedVals := map[string]bool{}
	for i := 0; i < 300; i++ {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for j := 0; j < 5; j++ {
			recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprintf("k%02d", rng.Intn(40))), Value: []byte(fmt.Sprintf("txn-%d-%d", i, j))})
		}
		if err := tx.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		commit := kgo.TryCommit
		if rng.Intn(3) == 0 {
			commit = kgo.TryAbort
			for _, r := range recs {
				abortedVals[string(r.Value)] = true
			}
		}
		if err := tx.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Key: []byte(fmt.Sprintf("k%02d", rng.Intn(40))), Value: []byte(fmt.Sprintf("plain-%d", i))}
		if rng.Intn(10) == 0 {
			r.Value = nil
		}
		if err := plain.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		last = r.Offset
	}
	committed := kgo.FetchIsolationLevel(kgo.ReadCommitted())
	before := liveView(consumeFranz(t, []string{n.Addr}, topic, last, committed))
	size := n.B.PartitionLog(topic, 0).Size()

	// Now clean (the node restarts with its cleaner on).
	n.Cfg.LogCleaner.Enable = true
	n.Restart()
	cleaned := compactedEverywhere(t, []*brokertest.Node{n}, topic, true)
	after := consumeFranz(t, []string{n.Addr}, topic, last, committed)
	checkCompacted(t, "read_committed after cleaning", after, before, 0, false)
	t.Logf("%d bytes cleaned to %d, first dirty %d", size, n.B.PartitionLog(topic, 0).Size(), cleaned)
	// Nothing of an aborted transaction is left in the cleaned section,
	// even for read_uncommitted.
	for _, r := range consumeFranz(t, []string{n.Addr}, topic, last) {
		if r.off < cleaned && abortedVals[r.val] {
			t.Fatalf("record %s=%s of an aborted transaction left at %d, below %d", r.key, r.val, r.off, cleaned)
		}
	}
	n.Restart()
	checkCompacted(t, "read_committed after a restart", consumeFranz(t, []string{n.Addr}, topic, last, committed), before, 0, false)
	// The last stable offset is not stuck behind a transaction the
	// replay of the cleaned log might think open.
	adm := n.Admin()
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	hw, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	lso, _ := ends.Lookup(topic, 0)
	end, _ := hw.Lookup(topic, 0)
	if lso.Offset != end.Offset {
		t.Fatalf("last stable offset %d, high watermark %d: a transaction looks open", lso.Offset, end.Offset)
	}
	// And the transactional producer carries on.
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Key: []byte("k00"), Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("transactional produce after cleaning and restart: %v", err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// TestOffsetsTopicCompacted: __consumer_offsets is compacted like any
// other compacted topic, so start-up replays live state, and every group
// keeps its latest commits across restarts.
func TestOffsetsTopicCompacted(t *testing.T) {
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		fastCleaner(c)
		c.OffsetsTopicPartitions = 1
		c.OffsetsTopicSegmentBytes = 32 << 10
	})
	n.CreateTopic("consumed", 4, nil)
	adm := n.Admin()
	ctx := testCtx(t)
	const groups, rounds = 20, 150
	var wg sync.WaitGroup
	errs := make(chan error, groups)
	for g := 0; g < groups; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				offs := kadm.Offsets{}
				for p := int32(0); p < 4; p++ {
					offs.AddOffset("consumed", p, int64(r*10+g), -1)
				}
				resp, err := adm.CommitOffsets(ctx, fmt.Sprintf("group-%02d", g), offs)
				if err == nil {
					err = resp.Error()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("commit: %v", err)
	}
	// Every commit leaves at least an empty batch (a Raft entry; see
	// docs/compaction.md), which the dirty ratio counts as clean: let the
	// cleaner start at any dirt.
	resp, err := n.Admin().AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.cleanable.dirty.ratio", Value: kadm.StringPtr("0.0001")}}, "__consumer_offsets")
	if err == nil {
		err = resp[0].Err
	}
	if err != nil {
		t.Fatal(err)
	}
	l := n.B.PartitionLog("__consumer_offsets", 0)
	compactedEverywhereTopic(t, n, "__consumer_offsets")
	left := 0
	if err := l.Scan(0, func(h records.Header, _ []byte) error { left += int(h.NumRecords); return nil }); err != nil {
		t.Fatal(err)
	}
	t.Logf("__consumer_offsets: %d commits, %d records left (%d bytes)", groups*rounds*4, left, l.Size())
	if left > groups*rounds*4/3 {
		t.Fatalf("__consumer_offsets not compacted: %d of %d records left", left, groups*rounds*4)
	}
	n.Restart()
	awaitCluster(t, "__consumer_offsets replayed", func() error {
		if !n.B.GroupsLoaded() {
			return errors.New("loading")
		}
		return nil
	})
	for g := 0; g < groups; g++ {
		resp, err := n.Admin().FetchOffsets(ctx, fmt.Sprintf("group-%02d", g))
		if err != nil {
			t.Fatal(err)
		}
		for p := int32(0); p < 4; p++ {
			o, ok := resp.Lookup("consumed", p)
			if !ok || o.Err != nil || o.At != int64((rounds-1)*10+g) {
				t.Fatalf("group %d partition %d after cleaning and restart: %+v", g, p, o)
			}
		}
	}
}

func compactedEverywhereTopic(t *testing.T, n *brokertest.Node, topic string) {
	t.Helper()
	awaitCluster(t, topic+" cleaned", func() error {
		l := n.B.PartitionLog(topic, 0)
		c, err := l.CleanableState(l.EndOffset(), math.MaxInt64)
		if err != nil {
			return err
		}
		if c.DirtyBytes > 0 || l.FirstDirtyOffset() == 0 {
			return fmt.Errorf("%d dirty bytes", c.DirtyBytes)
		}
		return nil
	})
}

// TestCompactionConfigsEnforcedOrRefused: the configs that were accepted
// and ignored now act or are refused with INVALID_CONFIG saying why.
func TestCompactionConfigsEnforcedOrRefused(t *testing.T) {
	n := brokertest.Start(t)
	adm := n.Admin()
	ctx := testCtx(t)
	create := func(name string, cfg map[string]*string) error {
		t.Helper()
		resp, err := adm.CreateTopics(ctx, 1, 1, cfg, name)
		if err != nil {
			t.Fatal(err)
		}
		return resp[name].Err
	}
	for _, c := range []struct {
		name, value, why string
	}{
		{"preallocate", "true", "does not preallocate"},
		{"file.delete.delay.ms", "60000", "removes a deleted segment's files at once"},
		{"min.compaction.lag.ms", "5000", "min.compaction.lag.ms (5000) > max.compaction.lag.ms (1000)"},
	} {
		cfg := map[string]*string{c.name: kadm.StringPtr(c.value)}
		if c.name == "min.compaction.lag.ms" {
			cfg["max.compaction.lag.ms"] = kadm.StringPtr("1000")
		}
		err := create("refused-"+strings.ReplaceAll(c.name, ".", "-"), cfg)
		var ke *kerr.Error
		if !errors.As(err, &ke) || ke != kerr.InvalidConfig {
			t.Fatalf("%s=%s: %v, want INVALID_CONFIG", c.name, c.value, err)
		}
		resp, _ := adm.CreateTopics(ctx, 1, 1, cfg, "refused-again")
		if msg := resp["refused-again"].ErrMessage; !strings.Contains(msg, c.why) {
			t.Fatalf("%s=%s refused with %q, want it to say %q", c.name, c.value, msg, c.why)
		}
	}
	// Accepted ones act on the log.
	ok := map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact,delete"), "delete.retention.ms": kadm.StringPtr("1234"),
		"min.compaction.lag.ms": kadm.StringPtr("10"), "max.compaction.lag.ms": kadm.StringPtr("60000"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.25"), "segment.jitter.ms": kadm.StringPtr("500"),
		"segment.index.bytes": kadm.StringPtr("8192"), "flush.messages": kadm.StringPtr("100"),
		"flush.ms": kadm.StringPtr("1000"), "preallocate": kadm.StringPtr("false"), "file.delete.delay.ms": kadm.StringPtr("0"),
		"segment.bytes": kadm.StringPtr("200"),
	}
	if err := create("acted-on", ok); err != nil {
		t.Fatalf("valid configs refused: %v", err)
	}
	got := n.B.PartitionLog("acted-on", 0).Config()
	if !got.Compact || got.DeleteRetention != 1234*time.Millisecond || got.MinCompactionLag != 10*time.Millisecond ||
		got.MaxCompactionLag != time.Minute || got.MinCleanableRatio != 0.25 || got.SegmentJitter != 500*time.Millisecond ||
		got.IndexMaxEntries != 1024 || got.FlushMessages != 100 || got.SegmentBytes != 200 {
		t.Fatalf("log config %+v", got)
	}
}
