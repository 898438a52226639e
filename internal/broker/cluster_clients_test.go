package broker_test

// Acceptance tests for issue 10: real Kafka clients read a 3-node cluster
// and see Kafka's offsets - a fresh partition's first record at 0,
// contiguous offsets, the high watermark equal to the records written, no
// record the producer did not write - also after the leader changes.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
)

// clientTool finds an external client, failing in CI (.ci/run installs it)
// and skipping elsewhere when it is absent.
func clientTool(t *testing.T, name string, check ...string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil && len(check) > 0 {
		err = exec.Command(path, check...).Run()
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not usable (%v); .ci/run installs it with apt-get", name, err)
		}
		t.Skipf("%s not usable here (%v); apt-get install it (see .ci/run)", name, err)
	}
	return path
}

// readKcat reads partition 0 of topic from the start to the end with
// librdkafka's kcat: each record's offset and value.
func readKcat(t *testing.T, seeds []string, topic string) ([]int64, []string) {
	t.Helper()
	kcat := clientTool(t, "kcat")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, kcat, "-b", strings.Join(seeds, ","), "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q", "-f", "%o %s\n")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat: %v\n%s", err, errb.String())
	}
	var offs []int64
	var vals []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if line == "" {
			continue
		}
		o, v, _ := strings.Cut(line, " ")
		n, err := strconv.ParseInt(o, 10, 64)
		if err != nil {
			t.Fatalf("kcat line %q", line)
		}
		offs, vals = append(offs, n), append(vals, v)
	}
	return offs, vals
}

// confluentScript reads partition 0 from the start to its end and prints
// the watermarks, then one "offset value" line per record.
const confluentScript = `
import sys
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "acceptance-reader", "enable.auto.commit": False,
              "enable.partition.eof": True, "auto.offset.reset": "earliest"})
lo, hi = c.get_watermark_offsets(TopicPartition(sys.argv[2], 0), timeout=30)
print("watermarks", lo, hi)
c.assign([TopicPartition(sys.argv[2], 0, 0)])
while True:
    m = c.poll(30)
    if m is None:
        sys.exit("timed out")
    if m.error():
        if m.error().code() == -191:  # _PARTITION_EOF
            break
        sys.exit(str(m.error()))
    print(m.offset(), m.value().decode())
c.close()
`

// readConfluent reads with Debian's python3-confluent-kafka (librdkafka).
func readConfluent(t *testing.T, seeds []string, topic string) (lo, hi int64, offs []int64, vals []string) {
	t.Helper()
	py := clientTool(t, "/usr/bin/python3", "-c", "import confluent_kafka")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, py, "-c", confluentScript, strings.Join(seeds, ","), topic)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("confluent-kafka: %v\n%s%s", err, out.String(), errb.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if rest, ok := strings.CutPrefix(line, "watermarks "); ok {
			fmt.Sscan(rest, &lo, &hi)
			continue
		}
		o, v, _ := strings.Cut(line, " ")
		n, err := strconv.ParseInt(o, 10, 64)
		if err != nil {
			t.Fatalf("confluent-kafka line %q", line)
		}
		offs, vals = append(offs, n), append(vals, v)
	}
	return lo, hi, offs, vals
}

// readKafkaGo reads with segmentio/kafka-go, which hands control batches to
// the application as messages: a phantom record shows up here.
func readKafkaGo(t *testing.T, seeds []string, topic string, want int) (hi int64, offs []int64, vals []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var conn *kafka.Conn
	var err error
	for _, s := range seeds {
		if conn, err = kafka.DialLeader(ctx, "tcp", s, topic, 0); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("kafka-go: dial leader: %v", err)
	}
	hi, err = conn.ReadLastOffset()
	conn.Close()
	if err != nil {
		t.Fatalf("kafka-go: last offset: %v", err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: seeds, Topic: topic, Partition: 0, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(0); err != nil {
		t.Fatal(err)
	}
	// Everything up to the high watermark; a phantom record makes it more
	// than want, and is reported rather than waited past.
	for int64(len(offs)) < hi && (len(offs) == 0 || offs[len(offs)-1] < hi-1) {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("kafka-go: read after %d messages (high watermark %d): %v", len(offs), hi, err)
		}
		offs, vals = append(offs, m.Offset), append(vals, string(m.Value))
	}
	return hi, offs, vals
}

// readFranz reads with franz-go and lists the high watermark.
func readFranz(t *testing.T, seeds []string, topic string, want int) (hi int64, offs []int64, vals []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := kadmClient(t, seeds)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := ends.Lookup(topic, 0)
	hi = o.Offset
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for len(offs) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("franz-go: read %d of %d: %v", len(offs), want, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) { offs, vals = append(offs, r.Offset), append(vals, string(r.Value)) })
	}
	return hi, offs, vals
}

// checkKafkaOffsets fails unless offs are exactly 0..want-1 with the values
// written (no phantom, none missing) and hi (when known, >= 0) is want.
func checkKafkaOffsets(t *testing.T, client string, hi int64, offs []int64, vals []string, want int) {
	t.Helper()
	var errs []error
	if hi >= 0 && hi != int64(want) {
		errs = append(errs, fmt.Errorf("high watermark %d, want %d", hi, want))
	}
	if len(offs) > 0 && offs[0] != 0 {
		errs = append(errs, fmt.Errorf("first record at offset %d, want 0", offs[0]))
	}
	if len(offs) != want {
		errs = append(errs, fmt.Errorf("%d records, want %d (offsets %v)", len(offs), want, offs))
	}
	for i := range offs {
		if offs[i] != int64(i) || i < len(vals) && vals[i] != fmt.Sprintf("rec-%d", i) {
			errs = append(errs, fmt.Errorf("record %d: offset %d value %q, want offset %d value rec-%d", i, offs[i], vals[i], i, i))
			break
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("%s: %v", client, err)
	}
}

// produceNumbered writes rec-from .. rec-(to-1) to partition 0, acks=all,
// idempotent, one record per batch.
func produceNumbered(t *testing.T, seeds []string, topic string, from, to int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RetryTimeout(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for i := from; i < to; i++ {
		r := &kgo.Record{Key: []byte(strconv.Itoa(i % 3)), Value: fmt.Appendf(nil, "rec-%d", i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce rec-%d: %v", i, err)
		}
	}
}

// TestClusterClientsSeeKafkaOffsets: kcat and confluent-kafka (both
// librdkafka), kafka-go and franz-go read a fresh RF=3 partition of a
// 3-node cluster; then its leader stops, more is written, and they read
// again from the two that are left.
func TestClusterClientsSeeKafkaOffsets(t *testing.T) {
	nodes := startCluster(t, 3, func(c *broker.Config) { c.ControlledShutdown = false })
	const topic, n = "acceptance", 20
	createClusterTopic(t, nodes, topic, 1, 3, nil)
	seeds := addrs(nodes)
	produceNumbered(t, seeds, topic, 0, n)

	check := func(seeds []string, want int) {
		t.Helper()
		offs, vals := readKcat(t, seeds, topic)
		checkKafkaOffsets(t, "kcat", -1, offs, vals, want)
		lo, hi, offs, vals := readConfluent(t, seeds, topic)
		if lo != 0 {
			t.Errorf("confluent-kafka: low watermark %d, want 0", lo)
		}
		checkKafkaOffsets(t, "confluent-kafka", hi, offs, vals, want)
		hi, offs, vals = readKafkaGo(t, seeds, topic, want)
		checkKafkaOffsets(t, "kafka-go", hi, offs, vals, want)
		hi, offs, vals = readFranz(t, seeds, topic, want)
		checkKafkaOffsets(t, "franz-go", hi, offs, vals, want)
	}
	check(seeds, n)

	leader := leaderNode(t, nodes, topic)
	t.Logf("stopping node %d, the partition's leader", leader.Cfg.NodeID)
	leader.Stop()
	rest := without(nodes, leader)
	brokertest.Await(t, "a new leader", func() error {
		l, _, _, err := leaderOf(rest[0], topic)
		if err == nil && l == leader.Cfg.NodeID {
			err = errors.New("still the stopped node")
		}
		return err
	})
	produceNumbered(t, addrs(rest), topic, n, 2*n)
	check(addrs(rest), 2*n)
}
