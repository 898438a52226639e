package broker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"

	"holdfast/internal/coordinator"
	"holdfast/internal/metadata"
	"holdfast/internal/raft"
)

// What a whole-node check reads of a running broker (brokertest's
// simulation, sim_test.go): its Raft host, its coordinators, and its
// metadata in a form two nodes can compare.

// RaftHost is the broker's Raft host (every group of this node).
func (b *Broker) RaftHost() *raft.Host { return b.cluster.Host() }

// Coordinators is the broker's group and transaction coordinators.
func (b *Broker) Coordinators() *coordinator.Host { return b.coord }

// MetadataFingerprint is the applied metadata offset and a digest of the
// metadata at it (topics with their partitions' replicas, brokers, the
// fenced set, the cluster id): two nodes that applied the same commands
// give the same pair.
func (b *Broker) MetadataFingerprint() (applied int64, digest string) {
	ts := b.meta.Topics()
	slices.SortFunc(ts, func(a, c metadata.Topic) int { return strings.Compare(a.Name, c.Name) })
	brs := b.meta.Brokers()
	slices.SortFunc(brs, func(a, c metadata.BrokerInfo) int { return int(a.ID - c.ID) })
	data, err := json.Marshal(struct {
		Cluster string
		Topics  any
		Brokers any
		Fenced  []int32
	}{b.meta.ClusterID(), ts, brs, slices.Sorted(slices.Values(b.meta.FencedBrokers()))})
	if err != nil {
		return b.meta.Applied(), "unencodable: " + err.Error()
	}
	sum := sha256.Sum256(data)
	return b.meta.Applied(), hex.EncodeToString(sum[:8])
}

// TopicID is a topic's id in this node's metadata.
func (b *Broker) TopicID(name string) ([16]byte, bool) {
	t, ok := b.meta.Topic(name)
	return t.ID, ok
}
