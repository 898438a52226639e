package broker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/storage"
)

// gatedFS holds every creation of a partition directory whose name starts
// with prefix until open is closed: the replicas of such a topic cannot
// open before the test lets them.
type gatedFS struct {
	storage.FS
	prefix string
	open   <-chan struct{}
}

func (g gatedFS) MkdirAll(dir string, perm os.FileMode) error {
	if strings.HasPrefix(filepath.Base(dir), g.prefix) {
		<-g.open
	}
	return g.FS.MkdirAll(dir, perm)
}

// startGatedCluster starts three nodes whose replicas of topics named
// prefix* open only once the returned function has been called.
func startGatedCluster(t *testing.T, prefix string) ([]*brokertest.Node, func()) {
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	nodes := startCluster(t, 3, func(c *broker.Config) {
		c.FS = gatedFS{FS: storage.OSFS(), prefix: prefix, open: gate}
	})
	t.Cleanup(release) // before the nodes stop (cleanups run last first)
	return nodes, release
}

// createGated starts a gated cluster for topic (startGatedCluster) and
// creates topic with partitions at RF=3 through kadm with a 4 s request
// timeout: the answer must come while no replica of it can open.
func createGated(t *testing.T, ctx context.Context, topic string, partitions int32) ([]*brokertest.Node, *kadm.Client, func(), kadm.CreateTopicResponse) {
	t.Helper()
	nodes, release := startGatedCluster(t, topic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokertest.Addrs(nodes)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	adm.SetTimeoutMillis(4000)
	resp, err := adm.CreateTopics(ctx, partitions, 3, nil, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("CreateTopics %s with every replica's open held back: %v", topic, err)
	}
	return nodes, adm, release, resp[topic]
}

// awaitLeaders waits until every running node's metadata shows each of the
// topic's partitions with a leader and rf replicas, every replica open.
func awaitLeaders(t *testing.T, nodes []*brokertest.Node, topic string, partitions, rf int) {
	t.Helper()
	brokertest.Await(t, "a leader for every partition of "+topic+" on every node", func() error {
		for _, n := range nodes {
			md, err := n.Metadata(topic)
			if err != nil {
				return err
			}
			if len(md.Topics) != 1 || len(md.Topics[0].Partitions) != partitions {
				return fmt.Errorf("node %d: %d topics", n.Cfg.NodeID, len(md.Topics))
			}
			for _, p := range md.Topics[0].Partitions {
				if p.ErrorCode != 0 || p.Leader <= 0 || len(p.Replicas) != rf || p.LeaderEpoch < 0 {
					return fmt.Errorf("node %d partition %d: leader %d epoch %d replicas %v code %d", n.Cfg.NodeID, p.Partition, p.Leader, p.LeaderEpoch, p.Replicas, p.ErrorCode)
				}
			}
		}
		return nil
	})
}

// CreateTopics is answered once the topic is in the metadata, not once
// every replica is open (issue 17: 10,000 partitions took longer to open
// than the request's timeout, and the answer was REQUEST_TIMED_OUT). Here
// no replica of the topic can open until the answer has come: with the
// opens inside the metadata apply, it never came in time.
func TestClusterCreateTopicsAnswersBeforeReplicasOpen(t *testing.T) {
	const partitions = 500
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes, _, release, r := createGated(t, ctx, "wide", partitions)
	if r.NumPartitions != partitions || r.ReplicationFactor != 3 {
		t.Fatalf("answer: %d partitions, replication factor %d", r.NumPartitions, r.ReplicationFactor)
	}
	release()
	awaitLeaders(t, nodes, "wide", partitions, 3)

	// Every partition takes a record (acks=all: all three replicas).
	pr, err := kgo.NewClient(kgo.SeedBrokers(brokertest.Addrs(nodes)...), kgo.DefaultProduceTopic("wide"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var recs []*kgo.Record
	for p := range int32(partitions) {
		recs = append(recs, &kgo.Record{Partition: p, Value: []byte("v")})
	}
	if err := pr.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce to every partition: %v", err)
	}
}

// A delete applied after a create whose replicas are still queued to open
// wins: no replica of the deleted topic opens after it, and a topic of the
// same name created next starts empty and comes online.
func TestClusterDeleteWinsOverQueuedOpens(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes, adm, release, _ := createGated(t, ctx, "doomed", 200)
	// The deletion's apply waits for the opens under way (held by the
	// gate); the queued ones come after it and must not open.
	deleted := make(chan error, 1)
	go func() {
		dr, err := adm.DeleteTopics(ctx, "doomed")
		if err == nil {
			err = dr.Error()
		}
		deleted <- err
	}()
	time.Sleep(200 * time.Millisecond) // the deletion on its way (its order is what matters, not the pause)
	release()
	if err := <-deleted; err != nil {
		t.Fatalf("delete: %v", err)
	}
	brokertest.Await(t, "no data of the deleted topic on any node", func() error {
		for _, n := range nodes {
			names, err := os.ReadDir(n.Cfg.DataDir)
			if err != nil {
				return err
			}
			for _, e := range names {
				if strings.HasPrefix(e.Name(), "doomed-") && !strings.HasSuffix(e.Name(), "-delete") {
					return fmt.Errorf("node %d: %s", n.Cfg.NodeID, e.Name())
				}
			}
		}
		return nil
	})

	resp, err := adm.CreateTopics(ctx, 3, 3, nil, "doomed")
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("create again: %v", err)
	}
	awaitLeaders(t, nodes, "doomed", 3, 3)
	offs, err := adm.ListEndOffsets(ctx, "doomed")
	if err != nil {
		t.Fatal(err)
	}
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil || o.Offset != 0 {
			t.Errorf("new topic of the deleted one's name: partition %d end offset %d, err %v", o.Partition, o.Offset, o.Err)
		}
	})
}
