package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"holdfast/internal/auth"
)

// BrokerInfo is one registered broker (cluster mode): how clients reach it.
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
var ErrBrokerInUse = errors.New("controller: the broker still holds replicas")

// EncodeCommand and DecodeCommand are the metadata log's record value.
func EncodeCommand(c Command) ([]byte, error) { return json.Marshal(c) }

func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("controller: bad metadata command: %w", err)
	}
	return c, nil
}

// Applied is the end offset of the last metadata-log entry applied.
func (s *Store) Applied() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.st.Applied
}

// Brokers returns the registered brokers by id.
func (s *Store) Brokers() []BrokerInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.st.Brokers)
}

// Fenced reports whether broker id is fenced.
func (s *Store) Fenced(id int32) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Contains(s.st.Fenced, id)
}

// FencedBrokers returns the fenced broker ids, sorted.
func (s *Store) FencedBrokers() []int32 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.st.Fenced)
}

// Broker returns one registered broker.
func (s *Store) Broker(id int32) (BrokerInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, b := range s.st.Brokers {
		if b.ID == id {
			return b, true
		}
	}
	return BrokerInfo{}, false
}

// Apply applies one committed metadata command whose log entry ends at
// end. The change and the applied offset are persisted together, so a
// restart replays exactly the entries after it. An entry at or below the
// applied offset is skipped. A command that cannot apply (a topic created
// twice by racing proposals) still advances the applied offset, and fails
// the same way on every node: the state stays identical everywhere.
func (s *Store) Apply(end int64, c Command) (Topic, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if end <= s.st.Applied {
		return Topic{}, nil
	}
	next := s.st
	var t Topic
	err := s.applyTo(&next, c, &t)
	if err != nil {
		next = s.st // only the applied offset moves
	}
	next.Applied = end
	if cerr := s.commit(next); cerr != nil {
		return Topic{}, cerr
	}
	return t.clone(), err
}

func (s *Store) applyTo(next *state, c Command, out *Topic) error {
	find := func(name string) int {
		return slices.IndexFunc(next.Topics, func(t Topic) bool { return t.Name == name })
	}
	switch c.Op {
	case OpInit:
		if c.ClusterID == "" {
			return fmt.Errorf("controller: init without a cluster id")
		}
		next.ClusterID = c.ClusterID
	case OpRegister:
		if c.Broker == nil {
			return fmt.Errorf("controller: register without a broker")
		}
		bs := slices.DeleteFunc(slices.Clone(next.Brokers), func(b BrokerInfo) bool { return b.ID == c.Broker.ID })
		bs = append(bs, *c.Broker)
		sort.Slice(bs, func(i, j int) bool { return bs[i].ID < bs[j].ID })
		next.Brokers = bs
	case OpCreateTopic:
		t := c.Topic
		if t == nil || t.Partitions <= 0 || len(t.Replicas) != int(t.Partitions) {
			return ErrInvalidCount
		}
		if find(t.Name) >= 0 {
			return ErrTopicExists
		}
		if _, dup := s.byID[t.ID]; dup {
			return ErrTopicExists
		}
		nt := t.clone()
		nt.Dirs = nil
		recordDirs(next, &nt, 0)
		next.Topics = append(slices.Clone(next.Topics), nt)
		sort.Slice(next.Topics, func(i, j int) bool { return next.Topics[i].Name < next.Topics[j].Name })
		*out = nt
	case OpDeleteTopic:
		i := find(c.Name)
		if i < 0 {
			return ErrUnknownTopic
		}
		*out = next.Topics[i]
		next.Topics = slices.Delete(slices.Clone(next.Topics), i, i+1)
		next.Deleting = append(slices.Clone(next.Deleting), *out)
	case OpAddPartitions:
		i := find(c.Name)
		if i < 0 {
			return ErrUnknownTopic
		}
		t := next.Topics[i].clone()
		if c.Partitions <= t.Partitions || int(c.Partitions-t.Partitions) != len(c.Replicas) {
			return ErrInvalidCount
		}
		old := t.Partitions
		t.Partitions = c.Partitions
		t.Replicas = append(t.Replicas, c.Replicas...)
		recordDirs(next, &t, old)
		next.Topics = slices.Clone(next.Topics)
		next.Topics[i] = t
		*out = t
	case OpTopicConfigs:
		i := find(c.Name)
		if i < 0 {
			return ErrUnknownTopic
		}
		t := next.Topics[i].clone()
		t.Configs = maps.Clone(c.Configs)
		if t.Configs == nil {
			t.Configs = map[string]string{}
		}
		next.Topics = slices.Clone(next.Topics)
		next.Topics[i] = t
		*out = t
	case OpBrokerConfigs:
		// Name is the scope: "" the cluster-wide default, else a broker
		// id; Configs its whole new set (empty: none).
		next.BrokerConfigs = maps.Clone(next.BrokerConfigs)
		if len(c.Configs) == 0 {
			delete(next.BrokerConfigs, c.Name)
		} else {
			if next.BrokerConfigs == nil {
				next.BrokerConfigs = map[string]map[string]string{}
			}
			next.BrokerConfigs[c.Name] = maps.Clone(c.Configs)
		}
	case OpReassign, OpReassignDone:
		i := find(c.Name)
		if i < 0 {
			return ErrUnknownTopic
		}
		t := next.Topics[i].clone()
		var err error
		if c.Op == OpReassign {
			if err = applyReassign(next, &t, c); err == nil {
				recordDirs(next, &t, 0)
			}
		} else {
			err = applyReassignDone(&t, c)
		}
		if err != nil {
			return err
		}
		next.Topics = slices.Clone(next.Topics)
		next.Topics[i] = t
		*out = t
	case OpUnregister:
		for _, t := range next.Topics {
			for _, rs := range t.Replicas {
				if slices.Contains(rs, c.BrokerID) {
					return ErrBrokerInUse
				}
			}
		}
		next.Brokers = slices.DeleteFunc(slices.Clone(next.Brokers), func(b BrokerInfo) bool { return b.ID == c.BrokerID })
	case OpFence, OpUnfence:
		if len(c.IDs) == 0 {
			return fmt.Errorf("controller: %s without broker ids", c.Op)
		}
		fenced := slices.DeleteFunc(slices.Clone(next.Fenced), func(id int32) bool { return slices.Contains(c.IDs, id) })
		if c.Op == OpFence {
			fenced = append(fenced, c.IDs...)
			slices.Sort(fenced)
			fenced = slices.Compact(fenced)
		}
		next.Fenced = fenced
	case OpAllocateProducerIDs:
		return applyProducerIDs(next, c)
	default:
		if handled, err := applySecurity(next, c); handled {
			return err
		}
		if handled, err := applyQuotas(next, c); handled {
			return err
		}
		if handled, err := applyGroupConfigs(next, c); handled {
			return err
		}
		if handled, err := applyFeatures(next, c); handled {
			return err
		}
		return fmt.Errorf("controller: unknown metadata command %q", c.Op)
	}
	return nil
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
			if _, ok := t.Dirs[p][r]; ok || dirs[r] == "" {
				continue
			}
			if t.Dirs[p] == nil {
				t.Dirs[p] = map[int32]string{}
			}
			t.Dirs[p][r] = dirs[r]
		}
	}
}
