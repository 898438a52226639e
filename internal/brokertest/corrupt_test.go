package brokertest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/datadir"
	"holdfast/internal/records"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
)

// TestClusterCorruptReplicaHeals (issue 26): RF=3, one partition. The
// preferred replica is stopped, 64 bytes in the middle of one of its
// sealed segments are flipped, and it is started again (sealed segments
// are not read at open) and made leader. A consumer reading from the start
// must never get the bad bytes: the leader checks the cold range before
// it sends it, finds the corruption, steps down (KAFKA_STORAGE_ERROR, the
// client moves to the new leader) and is rebuilt from the two good copies.
// Every acknowledged record (before and after the flip) is read back once,
// in order; the node counts the corruption and the repair; the partition
// ends with three in-sync replicas, the rebuilt one holding every record.
// On the old code the consumer re-fetched the corrupt offset forever.
func TestClusterCorruptReplicaHeals(t *testing.T) {
	t.Run("consumer", func(t *testing.T) { corruptReplicaHeals(t, "consumer") })
	// A follower that was cut off while the corrupt batch was written
	// needs it from the corrupt leader's disk: Raft's read of the entries
	// finds the corruption (it went on failing every 2-4 s for good).
	t.Run("follower", func(t *testing.T) { corruptReplicaHeals(t, "follower") })
	// A sealed segment whose first batch header is damaged is refused at
	// open: the replica was reopened on the same files forever.
	t.Run("open", func(t *testing.T) { corruptReplicaHeals(t, "open") })
	// Issue 26's second fault: a replica whose disk was replaced (no vote
	// until caught up) copies from the corrupt leader. The leader hands
	// its leadership to the healthy follower before it stops: had it only
	// stopped, its vote would be gone too and nobody could be elected.
	t.Run("wiped", func(t *testing.T) { corruptReplicaHeals(t, "wiped") })
	// Nobody reads the flipped batch: the scrubber finds it on the
	// follower that holds it.
	t.Run("scrub", func(t *testing.T) { corruptReplicaHeals(t, "scrub") })
}

func corruptReplicaHeals(t *testing.T, mode string) {
	lagging := mode == "follower"
	c := brokertest.NewCluster(t, 3, func(cfg *broker.Config, _ *wire.Limits) {
		cfg.ControlledShutdown = false
		cfg.LogScrubBytesPerSecond = 0 // the read paths are under test here
		if mode == "scrub" {
			cfg.LogScrubBytesPerSecond = 64 << 20
		}
	})
	const topic = "corrupt"
	seg := "8192"
	c.CreateTopic(topic, 1, 3, map[string]*string{"segment.bytes": &seg})
	c.AwaitInSync(topic, 0)
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic), kgo.RetryTimeout(60*time.Second),
		kgo.MetadataMinAge(100*time.Millisecond))
	defer cl.Close()
	p, err := c.Nodes[0].Partition(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	victim := c.Node(p.Replicas[0]) // the preferred leader
	lag := c.Node(p.Replicas[2])
	const before, after = 3000, 500
	from := 0
	if lagging {
		produce(t, cl, 0, 100)
		c.Isolate(lag.Cfg.NodeID)
		t.Logf("node %d cut off", lag.Cfg.NodeID)
		from = 100
	}
	for i := from; i < before; i += 100 {
		produce(t, cl, i, 100) // one batch each
	}
	if !lagging {
		c.AwaitInSync(topic, 0)
	}

	dir := filepath.Join(victim.Cfg.DataDir, topic+"-0")
	victim.Stop()
	flipped, _ := flipMiddleBatch(t, dir, mode == "open")
	t.Logf("node %d stopped, 64 bytes flipped in %s; restarting it", victim.Cfg.NodeID, flipped)
	victim.Restart()

	// Make the corrupt replica the leader (a preferred election moves the
	// leadership back to it once it has caught up). Asked of the replica
	// itself: a client's admin request may go to the cut-off node, which
	// cannot reach the leader.
	elect := kmsg.NewPtrElectLeadersRequest()
	elect.ElectionType, elect.TimeoutMillis = 0, 2000
	et := kmsg.NewElectLeadersRequestTopic()
	et.Topic, et.Partitions = topic, []int32{0}
	elect.Topics = append(elect.Topics, et)
	leadOrFound := func() {
		brokertest.Await(t, fmt.Sprintf("node %d to lead or to have found the corruption", victim.Cfg.NodeID), func() error {
			if victim.B.ReplicationStats().Corruptions > 0 {
				if mode == "consumer" {
					t.Log("the corruption was found before the consumer read it")
				}
				return nil
			}
			if st, err := victim.Partition(topic, 0); err == nil && st.Leader == victim.Cfg.NodeID {
				return nil
			}
			_, _ = victim.Request(elect)
			return fmt.Errorf("not leading yet")
		})
	}
	if mode == "scrub" {
		brokertest.Await(t, "the scrubber to find the corruption", func() error {
			if st := victim.B.ReplicationStats(); st.Corruptions == 0 {
				return fmt.Errorf("node %d: none found yet, %d bytes scrubbed", victim.Cfg.NodeID, st.Scrubbed)
			}
			return nil
		})
	} else {
		leadOrFound()
	}
	if mode == "wiped" {
		lag.Wipe()
		lag.Start()
		t.Logf("node %d wiped and restarted: it copies from the corrupt leader %d", lag.Cfg.NodeID, victim.Cfg.NodeID)
		// Its rejoin resets the leader's progress, which costs an
		// election: the healthy node may win it and feed the wiped one
		// instead. Then the corruption is still unseen; the consumer
		// below finds it once the corrupt replica leads again.
		brokertest.Await(t, "the corrupt leader to find the corruption, or the wiped node to catch up from the healthy one", func() error {
			if victim.B.ReplicationStats().Corruptions > 0 {
				t.Log("the corrupt leader found it reading for the wiped node")
				return nil
			}
			if err := holdsExactly(lag, topic, before); err != nil {
				return fmt.Errorf("neither: %w", err)
			}
			t.Log("the wiped node caught up from the healthy one")
			return nil
		})
		leadOrFound()
	}
	if lagging {
		c.Heal()
		brokertest.Await(t, "the corrupt leader to find the corruption reading for the follower", func() error {
			if n := victim.B.ReplicationStats().Corruptions; n == 0 {
				return fmt.Errorf("node %d found none yet", victim.Cfg.NodeID)
			}
			return nil
		})
	}

	// Consume everything from the start while producing more.
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for i := before; i < before+after; i += 50 {
			recs := make([]*kgo.Record, 50)
			for k := range recs {
				recs[k] = &kgo.Record{Value: []byte(strconv.Itoa(i + k))}
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	cons := c.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond))
	defer cons.Close()
	next := 0
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for next < before+after {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records (the rest never came)", next, before+after)
		}
		fs.EachError(func(_ string, _ int32, err error) {
			t.Logf("fetch error (the client retries): %v", err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) != strconv.Itoa(next) {
				t.Fatalf("record %d at offset %d is %q", next, r.Offset, r.Value)
			}
			next++
		})
	}
	if err := <-done; err != nil {
		t.Fatalf("produce after the flip: %v", err)
	}

	brokertest.Await(t, "the corrupt replica to be found and rebuilt", func() error {
		st := victim.B.ReplicationStats()
		if st.Corruptions == 0 || st.Repairs == 0 {
			return fmt.Errorf("node %d: corruptions %d, repairs %d", victim.Cfg.NodeID, st.Corruptions, st.Repairs)
		}
		return nil
	})
	c.AwaitInSync(topic, 0)
	for _, n := range c.Nodes {
		brokertest.Await(t, fmt.Sprintf("node %d's log to hold every acknowledged record", n.Cfg.NodeID), func() error {
			return holdsExactly(n, topic, before+after)
		})
	}
	st := victim.B.ReplicationStats()
	t.Logf("node %d: corruptions %d, repairs %d; %d records read back in order", victim.Cfg.NodeID, st.Corruptions, st.Repairs, next)
}

// flipMiddleBatch flips 64 bytes inside the records of a batch in the
// middle of the first segment (sealed) of the log in dir, or with header
// the first 64 bytes of the second segment (sealed too), and returns the
// file's name and the flipped batch's base offset.
func flipMiddleBatch(t *testing.T, dir string, header bool) (string, int64) {
	t.Helper()
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for _, n := range names {
		if filepath.Ext(n.Name()) == ".log" {
			logs = append(logs, n.Name())
		}
	}
	slices.Sort(logs)
	if len(logs) < 3 {
		t.Fatalf("%d segments in %s: fewer than two sealed", len(logs), dir)
	}
	path := filepath.Join(dir, logs[0])
	if header {
		path = filepath.Join(dir, logs[1])
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pos []int
	for rest := b; len(rest) > 0; {
		batch, next, err := records.Next(rest)
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, len(b)-len(rest))
		if len(batch) < records.HeaderSize+64 {
			t.Fatalf("batch of %d bytes", len(batch))
		}
		rest = next
	}
	if len(pos) < 3 {
		t.Fatalf("%d batches in %s", len(pos), path)
	}
	start := pos[len(pos)/2]
	at := start + records.HeaderSize
	if header {
		start, at = 0, 0
	}
	h, err := records.ParseHeader(b[start:])
	if err != nil {
		t.Fatal(err)
	}
	for i := at; i < at+64; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, h.BaseOffset
}

// TestSingleNodeCorruptBatch: the only replica of a partition (a single
// node) has 64 flipped bytes in a sealed segment. There is nothing to
// rebuild from, so it keeps its data and keeps serving: a fetch of the bad
// range answers KAFKA_STORAGE_ERROR (never the bytes), the corruption is
// counted, records after it are read, and produce goes on.
func TestSingleNodeCorruptBatch(t *testing.T) {
	n := brokertest.Start(t, func(cfg *broker.Config, _ *wire.Limits) { cfg.LogScrubBytesPerSecond = 0 })
	const topic = "corrupt1"
	seg := "8192"
	n.CreateTopic(topic, 1, map[string]*string{"segment.bytes": &seg})
	cl := n.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic))
	defer cl.Close()
	for i := 0; i < 3000; i += 100 {
		produce(t, cl, i, 100)
	}
	n.Stop()
	_, bad := flipMiddleBatch(t, filepath.Join(n.Cfg.DataDir, topic+"-0"), false)
	n.Restart()
	cl2 := n.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic))
	defer cl2.Close()

	fetch := func(offset int64) kmsg.FetchResponseTopicPartition {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 100, 1, 1<<20
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes = offset, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := n.Request(brokertest.Pin(req, 11))
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}
	if p := fetch(bad); p.ErrorCode != kerr.KafkaStorageError.Code || len(p.RecordBatches) != 0 {
		t.Fatalf("fetch of the flipped batch at %d: %v with %d bytes, want KAFKA_STORAGE_ERROR and none", bad, kerr.ErrorForCode(p.ErrorCode), len(p.RecordBatches))
	}
	if got := n.B.ReplicationStats().Corruptions; got != 1 {
		t.Fatalf("corruptions %d, want 1", got)
	}
	produce(t, cl2, 3000, 100) // the only replica still takes writes
	cons := n.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(bad + 100)}}))
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for next := bad + 100; next < 3100; {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read up to %d of 3100 past the bad batch", next)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) != strconv.Itoa(int(next)) {
				t.Fatalf("offset %d is %q", r.Offset, r.Value)
			}
			next++
		})
	}
}

// TestClusterCorruptJournalRejoins (issue 26): bytes flip in the middle of
// a node's Raft hard-state journal while it is stopped. The journal is not
// cut (that forgot every later term and vote); the node moves its data
// directory aside, comes back with a new directory id as a replaced disk,
// copies its replicas from the others without voting until caught up, and
// ends holding every acknowledged record, in sync.
func TestClusterCorruptJournalRejoins(t *testing.T) {
	c := brokertest.NewCluster(t, 3, func(cfg *broker.Config, _ *wire.Limits) {
		cfg.ControlledShutdown = false
	})
	const topic = "journal"
	c.CreateTopic(topic, 1, 3, nil)
	c.AwaitInSync(topic, 0)
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic), kgo.RetryTimeout(60*time.Second),
		kgo.MetadataMinAge(100*time.Millisecond))
	defer cl.Close()
	produce(t, cl, 0, 500)
	c.AwaitInSync(topic, 0)
	victim := c.Nodes[2]
	dirID := func() datadir.UUID {
		id, err := datadir.Open(storage.OSFS(), victim.Cfg.DataDir, victim.Cfg.NodeID)
		if err != nil {
			t.Fatal(err)
		}
		return id.DirectoryID
	}
	oldDir := dirID()
	victim.Stop()
	path := filepath.Join(victim.Cfg.DataDir, "raft-state.journal")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 200 {
		t.Fatalf("journal of %d bytes", len(b))
	}
	for i := len(b) / 2; i < len(b)/2+8; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	victim.Restart()
	if id := dirID(); id == oldDir {
		t.Fatalf("node %d kept its directory id %s after a corrupt journal", victim.Cfg.NodeID, id)
	}
	ents, err := os.ReadDir(victim.Cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	quarantined := false
	for _, e := range ents {
		quarantined = quarantined || e.IsDir() && len(e.Name()) > 13 && e.Name()[:13] == ".quarantined-"
	}
	if !quarantined {
		t.Fatalf("no quarantined directory in %s", victim.Cfg.DataDir)
	}
	produce(t, cl, 500, 100)
	c.AwaitInSync(topic, 0)
	brokertest.Await(t, fmt.Sprintf("node %d's log to hold every acknowledged record", victim.Cfg.NodeID), func() error {
		return holdsExactly(victim, topic, 600)
	})
}
