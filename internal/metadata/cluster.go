package metadata

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"holdfast/internal/auth"
)

// BrokerInfo is one registered broker: how clients reach it.
type BrokerInfo struct {
	ID   int32  `json:"id"`
	Host string `json:"host"`
	Port int32  `json:"port"`
	Rack string `json:"rack,omitempty"`
	// RaftAddr is the Raft address of a broker-only node (one not in
	// --peers, which the others cannot know from their config).
	RaftAddr string `json:"raft_addr,omitempty"`
	// Listeners are the broker's named endpoints (advertised.listeners),
	// Host:Port being the first. Empty (a registration from before named
	// listeners): Host:Port serves every listener name.
	Listeners []Endpoint `json:"listeners,omitempty"`
	// DirID is the directory id of the broker's data directory (KIP-858's
	// log directory id), registered at every start: a new one means the
	// broker's disk was replaced and its old replicas' data is gone.
	DirID string `json:"dir_id,omitempty"`
}

// Endpoint is one named listener of a broker.
type Endpoint struct {
	Name     string `json:"name"`
	Host     string `json:"host"`
	Port     int32  `json:"port"`
	Protocol string `json:"protocol"` // PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
}

// Equal reports whether two registrations say the same.
func (b BrokerInfo) Equal(o BrokerInfo) bool {
	return b.ID == o.ID && b.Host == o.Host && b.Port == o.Port && b.Rack == o.Rack && b.RaftAddr == o.RaftAddr &&
		b.DirID == o.DirID && slices.Equal(b.Listeners, o.Listeners)
}

// Endpoint returns the broker's endpoint for a listener name.
func (b BrokerInfo) Endpoint(listener string) (Endpoint, bool) {
	if len(b.Listeners) == 0 {
		return Endpoint{Name: listener, Host: b.Host, Port: b.Port}, true
	}
	for _, e := range b.Listeners {
		if e.Name == listener {
			return e, true
		}
	}
	return Endpoint{}, false
}

// Command is one entry of the metadata Raft log. The proposer (the
// metadata leader) fills in everything that is not deterministic - topic
// ids, replica placement - so that every node applies the same change.
type Command struct {
	Op         string            `json:"op"` // see the Op* constants
	ClusterID  string            `json:"cluster_id,omitempty"`
	Broker     *BrokerInfo       `json:"broker,omitempty"`
	Topic      *Topic            `json:"topic,omitempty"` // OpCreateTopic
	Name       string            `json:"name,omitempty"`
	Partitions int32             `json:"partitions,omitempty"`
	Replicas   [][]int32         `json:"replicas,omitempty"` // OpAddPartitions: the new ones
	Configs    map[string]string `json:"configs,omitempty"`
	// OpReassign / OpReassignDone: the partition and its target replicas
	// (OpReassign with no target cancels).
	Partition int32   `json:"partition,omitempty"`
	Target    []int32 `json:"target,omitempty"`
	// OpUnregister: the broker id.
	BrokerID int32   `json:"broker_id,omitempty"`
	IDs      []int32 `json:"ids,omitempty"` // OpFence, OpUnfence: broker ids
	// OpAllocateProducerIDs: the block [ProducerIDStart,
	// ProducerIDStart+ProducerIDLen) goes to BrokerID (producerids.go).
	ProducerIDStart int64 `json:"producer_id_start,omitempty"`
	ProducerIDLen   int64 `json:"producer_id_len,omitempty"`
	// Security commands (security.go).
	ACLs           []auth.ACL             `json:"acls,omitempty"`
	Scram          []auth.ScramCredential `json:"scram,omitempty"`
	ScramDeletions []ScramKey             `json:"scram_deletions,omitempty"`
	// OpClientQuotas (quotas.go).
	Quotas []QuotaAlteration `json:"quotas,omitempty"`
	// OpFeatures (features.go): finalized feature levels by name.
	Features map[string]int16 `json:"features,omitempty"`

	// Size is the length of the log record the command was decoded from
	// (DecodeCommand): what it adds to the log a snapshot bounds.
	Size int `json:"-"`
}

// Metadata commands.
const (
	OpInit          = "init" // adopt the cluster id
	OpRegister      = "register"
	OpCreateTopic   = "create_topic"
	OpDeleteTopic   = "delete_topic"
	OpAddPartitions = "add_partitions"
	OpTopicConfigs  = "topic_configs"
	OpBrokerConfigs = "broker_configs" // Name: scope ("" or a broker id)
	OpReassign      = "reassign"       // reassign.go
	OpReassignDone  = "reassign_done"  // reassign.go
	OpUnregister    = "unregister"     // a broker-only node leaves
	// A fenced broker's session with the controller expired (or it shut
	// down cleanly): it is left out of Metadata and never named as leader
	// or coordinator until a heartbeat unfences it. Committed, so every
	// node agrees on who is fenced.
	OpFence   = "fence"
	OpUnfence = "unfence"
	// OpAllocateProducerIDs gives a broker a block of producer ids
	// (Kafka's AllocateProducerIds / ProducerIdsRecord).
	OpAllocateProducerIDs = "allocate_producer_ids"
)

// ErrBrokerInUse refuses unregistering a broker that still holds replicas.
var ErrBrokerInUse = errors.New("metadata: the broker still holds replicas")

// EncodeCommand and DecodeCommand are the metadata log's record value.
func EncodeCommand(c Command) ([]byte, error) { return json.Marshal(c) }

func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("metadata: bad metadata command: %w", err)
	}
	c.Size = len(b)
	return c, nil
}

// Applied is the end offset of the last metadata-log entry applied.
func (s *Store) Applied() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.img.st.Applied
}

// Brokers returns the registered brokers by id.
func (s *Store) Brokers() []BrokerInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.img.st.Brokers)
}

// Fenced reports whether broker id is fenced.
func (s *Store) Fenced(id int32) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Contains(s.img.st.Fenced, id)
}

// FencedBrokers returns the fenced broker ids, sorted.
func (s *Store) FencedBrokers() []int32 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.img.st.Fenced)
}

// Broker returns one registered broker.
func (s *Store) Broker(id int32) (BrokerInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, b := range s.img.st.Brokers {
		if b.ID == id {
			return b, true
		}
	}
	return BrokerInfo{}, false
}

// recordDirs records, for each replica of partitions from.. of t that has
// none yet, the directory id its broker is registered with now: the
// directory that replica's data lives in. Applied on every node from the
// same state, so every node records the same.
func recordDirs(st *state, t *Topic, from int32) {
	dirs := map[int32]string{}
	for _, b := range st.Brokers {
		dirs[b.ID] = b.DirID
	}
	for len(t.Dirs) < len(t.Replicas) {
		t.Dirs = append(t.Dirs, nil)
	}
	for p := int(from); p < len(t.Replicas); p++ {
		for _, r := range t.Replicas[p] {
			if t.Dirs[p].Has(r) || dirs[r] == "" {
				continue
			}
			// A new slice (the clipped one copies on append): a
			// PartitionDirs stored in a topic is never changed in place.
			t.Dirs[p] = append(slices.Clip(t.Dirs[p]), BrokerDir{Broker: r, Dir: dirs[r]})
		}
	}
}
