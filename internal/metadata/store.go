// Package metadata holds the node's cluster metadata: the cluster id,
// the topics (name, id, partition count, config overrides), brokers,
// configs, ACLs, quotas. It is the metadata Raft group's state machine:
// an immutable Image per applied offset (image.go), changed only by
// applying committed commands, and snapshotted to disk every so many
// bytes of the metadata log (snapshot.go), which is the record.
package metadata

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"holdfast/internal/auth"
	"holdfast/internal/storage"
)

// Errors returned by the Store's mutations. Callers map them onto Kafka
// error codes.
var (
	ErrTopicExists    = errors.New("metadata: topic already exists")
	ErrUnknownTopic   = errors.New("metadata: unknown topic")
	ErrInvalidCount   = errors.New("metadata: invalid partition count")
	errCorruptMetaDoc = errors.New("metadata: metadata file is corrupt")
)

// Topic is one topic's metadata.
type Topic struct {
	Name       string
	ID         [16]byte
	Partitions int32
	Configs    map[string]string // dynamic topic config overrides only
	Internal   bool
	// Replicas lists each partition's replica node ids. While
	// a partition is reassigned it is the union of the original and the
	// target replicas (reassign.go).
	Replicas [][]int32 `json:",omitempty"`
	// Initial is each partition's replica set at creation: the voters its
	// Raft group was bootstrapped with. A replica opened later (on a node
	// added by a reassignment) must bootstrap with the same voters and
	// replay the membership changes from the log. nil: equal to Replicas
	// (never reassigned; also every file written before reassignment).
	Initial [][]int32 `json:",omitempty"`
	// Reassigning are the partitions being moved, by partition.
	Reassigning []Reassignment `json:",omitempty"`
	// Dirs maps, per partition, each replica's broker to the directory id
	// the replica was assigned in. A broker whose directory
	// id differs has lost that replica's data: it catches up before it may
	// vote in the partition's Raft group.
	Dirs []PartitionDirs `json:",omitempty"`
	// PreRaft marks a topic created by a single node before it ran as a
	// one-voter cluster: its partition logs may hold batches no Raft group
	// wrote, which the group adopts as its committed history. Part of the
	// pre-Raft adoption (internal/preraft), removed with it.
	PreRaft bool `json:",omitempty"`
}

// ReplicaDir is the directory id replica broker of partition p was
// assigned in ("" if not recorded).
func (t Topic) ReplicaDir(p, broker int32) string {
	if int(p) >= len(t.Dirs) {
		return ""
	}
	return t.Dirs[p].Get(broker)
}

// IDString is the topic id as Kafka prints it (URL-safe base64, no padding).
func (t Topic) IDString() string { return base64.RawURLEncoding.EncodeToString(t.ID[:]) }

func (t Topic) clone() Topic {
	t.Configs = maps.Clone(t.Configs)
	if t.Configs == nil {
		t.Configs = map[string]string{}
	}
	t.Replicas = cloneSets(t.Replicas)
	t.Dirs = slices.Clone(t.Dirs) // each partition's is never changed in place (PartitionDirs)
	t.Initial = cloneSets(t.Initial)
	if t.Reassigning != nil {
		ra := make([]Reassignment, len(t.Reassigning))
		for i, r := range t.Reassigning {
			ra[i] = Reassignment{Partition: r.Partition, Target: slices.Clone(r.Target), Original: slices.Clone(r.Original)}
		}
		t.Reassigning = ra
	}
	return t
}

func cloneSets(in [][]int32) [][]int32 {
	if in == nil {
		return nil
	}
	out := make([][]int32, len(in))
	for i, r := range in {
		out[i] = slices.Clone(r)
	}
	return out
}

// state is what is persisted. Field names are part of the on-disk format.
type state struct {
	Version   int     `json:"version"`
	ClusterID string  `json:"cluster_id"`
	Topics    []Topic `json:"topics"`
	// BrokerConfigs are the dynamic broker configs (IncrementalAlterConfigs
	// on a BROKER resource) by scope: "" the cluster-wide default, else a
	// broker id. Each scope's map is replaced whole, never edited in place.
	BrokerConfigs map[string]map[string]string `json:"dynamic_broker_configs,omitempty"`
	// Deleting are topics removed from Topics whose data may still be on
	// disk: a crash between "forget the topic" and "remove its logs" must
	// not let a later topic of the same name reopen the old data.
	Deleting []Topic `json:"deleting,omitempty"`
	// RemoteDeleting are deleted topics with remote.storage.enable=true
	// whose objects in the object store may remain: the deletion is in
	// the metadata log, and each node's tiered storage deletes the
	// objects and calls FinishRemoteDelete (node-local, as Deleting), so
	// that a crash before they are gone leaves the deletion to the next
	// start.
	RemoteDeleting []Topic `json:"remote_deleting,omitempty"`

	// The registered brokers (cluster.go), and the end
	// offset of the last metadata-log entry applied to this file, so that
	// replay after a restart starts after it.
	Brokers []BrokerInfo `json:"brokers,omitempty"`
	Applied int64        `json:"applied_offset,omitempty"`
	// Fenced are the brokers whose controller session expired (sorted).
	Fenced []int32 `json:"fenced,omitempty"`
	// NextProducerID is the first producer id no broker has been given a
	// block of (producerids.go).
	NextProducerID int64 `json:"next_producer_id,omitempty"`
	// ProducerIDFloor: no broker hands out an id below it any more, also
	// from a block it holds already (the producers of a topic restored
	// from the object store keep their old ids; producerids.go).
	ProducerIDFloor int64 `json:"producer_id_floor,omitempty"`

	// Security (security.go): the ACLs, sorted, and the SCRAM
	// credentials, by user and mechanism.
	ACLs  []auth.ACL             `json:"acls,omitempty"`
	Scram []auth.ScramCredential `json:"scram,omitempty"`

	// Quotas are the client quotas by entity, sorted (quotas.go).
	Quotas []ClientQuota `json:"client_quotas,omitempty"`

	// GroupConfigs are the groups' dynamic config overrides (groupconfigs.go).
	GroupConfigs map[string]map[string]string `json:"group_configs,omitempty"`

	// Features are the finalized feature levels UpdateFeatures set
	// (features.go); a feature not here is at the binary's default.
	Features map[string]int16 `json:"features,omitempty"`
}

const stateVersion = 1

// Store is the node's metadata: the current Image, replaced whole by each
// applied command, and its snapshots on disk (snapshot.go). Safe for
// concurrent use. Applying a command changes memory only: the metadata
// Raft log is the record of every command, and a snapshot every so many
// bytes of log or so much time bounds what a restart replays from it.
type Store struct {
	dir string
	fs  storage.FS
	log *slog.Logger

	mu  sync.RWMutex
	img *Image
	gen uint64 // counts the images the store has held (TopicsCache)

	snap snapshotter // snapshot.go; guarded by mu
}

const (
	fileName = "cluster.json"
	tmpName  = fileName + ".tmp" // what storage.WriteFileAtomic writes first
)

// Open loads the metadata under dir - its last snapshot, and the deletions
// finished since - creating it (with a fresh cluster id) if there is none.
// The applied offset is the snapshot's: the caller replays the metadata
// log's committed entries after it (cluster.Node.OpenMetadata).
//
// clusterID is the cluster this node belongs to (from its data directory's
// identity): a new store takes it, an existing one must have it.
func Open(dir string, fs storage.FS, log *slog.Logger, clusterID string) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Store{dir: dir, fs: fs, log: log}
	s.snap.init(s)
	// The directory itself may be new (and its parents): make their
	// entries durable too.
	if err := storage.MkdirAllDurable(fs, dir); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	data, err := readFile(fs, join(dir, fileName))
	switch {
	case err == nil:
		st, err := decode(data)
		if err != nil {
			return nil, fmt.Errorf("metadata: %s: %w", join(dir, fileName), err)
		}
		if clusterID != "" && st.ClusterID != clusterID {
			return nil, fmt.Errorf("metadata: %s belongs to cluster %s, this node to %s", join(dir, fileName), st.ClusterID, clusterID)
		}
		s.img = newImage(st)
		s.snap.size = int64(len(data))
		if err := s.loadFinished(); err != nil {
			return nil, err
		}
	case isNotExist(err):
		// A leftover temp file is an interrupted first write: nothing was
		// ever acknowledged from it.
		if clusterID == "" {
			clusterID = newClusterID()
		}
		s.img = newImage(state{Version: stateVersion, ClusterID: clusterID})
		if err := s.snapshotNowLocked(); err != nil {
			return nil, err
		}
		log.Info("created cluster metadata", "cluster_id", s.img.st.ClusterID, "dir", dir)
	default:
		return nil, fmt.Errorf("metadata: %w", err)
	}
	s.gen++
	return s, nil
}

// Image is the current metadata image: immutable, so a reader may keep it
// as long as it likes (it does not see later changes).
func (s *Store) Image() *Image {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.img
}

// setImage makes next current. Called with mu held.
func (s *Store) setImage(next *Image) {
	s.img = next
	s.gen++
}

// ClusterID is the cluster's id, generated once and persisted.
func (s *Store) ClusterID() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.img.st.ClusterID
}

// Topic returns the named topic.
func (s *Store) Topic(name string) (Topic, bool) {
	t, ok := s.Image().Topic(name)
	if !ok {
		return Topic{}, false
	}
	return t.clone(), true
}

// TopicByID returns the topic with the given id.
func (s *Store) TopicByID(id [16]byte) (Topic, bool) {
	t, ok := s.Image().TopicByID(id)
	if !ok {
		return Topic{}, false
	}
	return t.clone(), true
}

// TopicName is the name of the topic with this id: what a fetch or a
// leader hint needs per request (TopicByID copies a slice and a map per
// partition, tens of thousands of allocations per fetch of a topic of
// 10,000 partitions).
func (s *Store) TopicName(id [16]byte) (string, bool) {
	t, ok := s.Image().TopicByID(id)
	if !ok {
		return "", false
	}
	return t.Name, true
}

// TopicHeader is Topic without the per-partition assignment: the name,
// id, partition count, flags and a copy of the config overrides; Replicas,
// Initial, Dirs and Reassigning are nil. For a request handler that needs
// only those per request: Topic copies a slice and a map per partition,
// thousands of allocations for every produce request to a topic of 1,000
// partitions.
func (s *Store) TopicHeader(name string) (Topic, bool) {
	t, ok := s.Image().Topic(name)
	if !ok {
		return Topic{}, false
	}
	return t.header(), true
}

// TopicHeaderByID is TopicHeader by topic id.
func (s *Store) TopicHeaderByID(id [16]byte) (Topic, bool) {
	t, ok := s.Image().TopicByID(id)
	if !ok {
		return Topic{}, false
	}
	return t.header(), true
}

func (t Topic) header() Topic {
	return Topic{Name: t.Name, ID: t.ID, Partitions: t.Partitions, Configs: t.configsCopy(), Internal: t.Internal, PreRaft: t.PreRaft}
}

func (t Topic) configsCopy() map[string]string {
	if t.Configs == nil {
		return map[string]string{}
	}
	return maps.Clone(t.Configs)
}

// BrokerConfigs are the dynamic broker configs of scope ("" for the
// cluster-wide default, else a broker id); nil if none. Read-only.
func (s *Store) BrokerConfigs(scope string) map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.img.st.BrokerConfigs[scope]
}

// Topics returns every topic, sorted by name.
func (s *Store) Topics() []Topic {
	ts := s.Image().topics()
	out := make([]Topic, len(ts))
	for i, t := range ts {
		out[i] = t.clone()
	}
	return out
}

// TopicsCache is a periodic loop's copy of the topics: Topics clones them
// again only after the metadata changed. With many partitions a clone per
// pass was most of an idle node's CPU (its garbage the rest).
type TopicsCache struct {
	s      *Store
	mu     sync.Mutex // one cache may serve several goroutines
	gen    uint64
	topics []Topic
}

// Generation is a count that moves with every change of the metadata
// (topics, brokers and their fencing, configs): a poller that saw the same
// count can keep what it derived from it.
func (s *Store) Generation() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gen
}

// NewTopicsCache returns an empty cache of s's topics.
func (s *Store) NewTopicsCache() *TopicsCache { return &TopicsCache{s: s} }

// Topics returns the topics as Store.Topics would. The slice is shared
// with later calls: read it, never modify it.
func (c *TopicsCache) Topics() []Topic {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.mu.RLock()
	img, gen := c.s.img, c.s.gen
	c.s.mu.RUnlock()
	if c.gen != gen {
		ts := img.topics()
		c.topics = make([]Topic, len(ts))
		for i, t := range ts {
			c.topics[i] = t.clone()
		}
		c.gen = gen
	}
	return c.topics
}

// Deleting returns the topics that were deleted but whose data may still
// be on disk; the caller removes the data and calls FinishDelete.
func (s *Store) Deleting() []Topic {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Topic, len(s.img.st.Deleting))
	for i, t := range s.img.st.Deleting {
		out[i] = t.clone()
	}
	return out
}

// Apply applies one committed metadata command whose log entry ends at
// end, in memory: the log holds the command, and the next snapshot its
// effect (snapshot.go). An entry at or below the applied offset is
// skipped. A command that cannot apply (a topic created twice by racing
// proposals) still advances the applied offset, and fails the same way on
// every node: the state stays identical everywhere.
func (s *Store) Apply(end int64, c Command) (Topic, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if end <= s.img.st.Applied {
		return Topic{}, nil
	}
	next, d, err := s.img.Apply(end, c)
	if err == nil && c.Op == OpDeleteTopic {
		// Node-local: this node may have removed the topic's data
		// before a crash that kept an older snapshot (replay).
		next.st.Deleting = s.snap.dropFinished(finishedData, next.st.Deleting)
		next.st.RemoteDeleting = s.snap.dropFinished(finishedRemote, next.st.RemoteDeleting)
	}
	s.setImage(next)
	s.snap.applied(c.Size)
	if err != nil {
		return Topic{}, err
	}
	if d.Topic == nil {
		return Topic{}, nil
	}
	return d.Topic.clone(), nil
}

// FinishDelete drops the deletion record of the topic with id, once its
// data is gone from disk. Node-local and not in the metadata log: it is
// durable when this returns (a small file of the deletions finished since
// the last snapshot), so that a replay after a crash does not remove the
// data of a new topic of the same name.
func (s *Store) FinishDelete(id [16]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.img.st.Deleting, func(t Topic) bool { return t.ID == id })
	if i < 0 {
		return nil
	}
	if err := s.snap.finish(finishedData, id); err != nil {
		return err
	}
	next := s.img.with()
	next.st.Deleting = slices.Delete(slices.Clone(s.img.st.Deleting), i, i+1)
	s.setImage(next)
	return nil
}

// RemoteDeleting returns the deleted tiered topics whose objects may
// still be in the object store; the caller deletes them and calls
// FinishRemoteDelete.
func (s *Store) RemoteDeleting() []Topic {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Topic, len(s.img.st.RemoteDeleting))
	for i, t := range s.img.st.RemoteDeleting {
		out[i] = t.clone()
	}
	return out
}

// FinishRemoteDelete drops the remote deletion record of the topic with
// id once its objects are gone: node-local and durable when it returns,
// as FinishDelete.
func (s *Store) FinishRemoteDelete(id [16]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.img.st.RemoteDeleting, func(t Topic) bool { return t.ID == id })
	if i < 0 {
		return nil
	}
	if err := s.snap.finish(finishedRemote, id); err != nil {
		return err
	}
	next := s.img.with()
	next.st.RemoteDeleting = slices.Delete(slices.Clone(s.img.st.RemoteDeleting), i, i+1)
	s.setImage(next)
	return nil
}

// The file is the JSON state followed by a line with its CRC-32C, so a
// torn or bit-rotted file is detected instead of silently misread.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encode(st state) ([]byte, error) {
	body, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, err
	}
	body = append(body, '\n')
	return fmt.Appendf(body, "crc32c %08x\n", crc32.Checksum(body, castagnoli)), nil
}

func decode(data []byte) (state, error) {
	// The trailer is exactly "crc32c xxxxxxxx\n" (16 bytes).
	const trailer = 16
	if len(data) < trailer {
		return state{}, errCorruptMetaDoc
	}
	body, tail := data[:len(data)-trailer], data[len(data)-trailer:]
	var sum uint32
	if _, err := fmt.Sscanf(string(tail), "crc32c %08x\n", &sum); err != nil || sum != crc32.Checksum(body, castagnoli) {
		return state{}, errCorruptMetaDoc
	}
	// The version first: a newer one may change the fields' types, which
	// must not read as a corrupt file.
	var v struct {
		Version int64 `json:"version"`
	}
	if err := json.Unmarshal(body, &v); err == nil {
		if err := storage.CheckVersion("version", v.Version, stateVersion); err != nil {
			return state{}, err
		}
	}
	var st state
	if err := json.Unmarshal(body, &st); err != nil {
		return state{}, fmt.Errorf("%w: %v", errCorruptMetaDoc, err)
	}
	if st.Version != stateVersion {
		return state{}, fmt.Errorf("metadata: unsupported metadata version %d, this binary reads %d", st.Version, stateVersion)
	}
	if st.ClusterID == "" {
		return state{}, errCorruptMetaDoc
	}
	return st, nil
}

// persist writes a snapshot atomically: temp file, fsync, rename over
// the old file, fsync the directory. A crash at any point leaves either
// the old or the new file, never a mix. It returns the snapshot's size.
func (s *Store) persist(st state) (int64, error) {
	data, err := encode(st)
	if err != nil {
		return 0, fmt.Errorf("metadata: encoding metadata: %w", err)
	}
	if _, err = storage.WriteFileAtomic(s.fs, join(s.dir, fileName), data); err != nil {
		return 0, fmt.Errorf("metadata: persisting metadata: %w", err)
	}
	return int64(len(data)), nil
}

// newClusterID returns a Kafka-style cluster id: 16 random bytes in URL-safe
// base64 without padding (22 characters).
func newClusterID() string {
	id := NewTopicID()
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// NewTopicID returns a random UUID as Kafka makes them: not the zero id, not
// the reserved metadata-topic id (0...01), and not one whose string form
// starts with '-' (it would read as a command-line flag).
func NewTopicID() [16]byte {
	for {
		var id [16]byte
		if _, err := rand.Read(id[:]); err != nil {
			panic(err) // crypto/rand never fails on supported platforms
		}
		id[6] = id[6]&0x0f | 0x40 // version 4
		id[8] = id[8]&0x3f | 0x80 // variant
		if id == ([16]byte{}) || id == ([16]byte{15: 1}) {
			continue
		}
		if base64.RawURLEncoding.EncodeToString(id[:])[0] == '-' {
			continue
		}
		return id
	}
}

// StoredClusterID returns the cluster id of the metadata stored in dir, ""
// if there is none (a node's data directory from before identities). For
// the pre-Raft adoption (internal/preraft), removed with it.
func StoredClusterID(dir string, fs storage.FS) (string, error) {
	data, err := readFile(fs, join(dir, fileName))
	if isNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("metadata: %w", err)
	}
	st, err := decode(data)
	if err != nil {
		return "", fmt.Errorf("metadata: %s: %w", join(dir, fileName), err)
	}
	return st.ClusterID, nil
}

// AdoptSingleNode turns the metadata of a single node written before a
// single node was a cluster of one into a one-voter cluster's: topics that
// name no replicas get this node (in directory dir) as the only replica of
// every partition, and producer ids continue from nextProducerID. The
// metadata log never held those topics; with one voter the store is the
// only state there is. It reports whether anything changed. For the
// pre-Raft adoption (internal/preraft), removed with it.
func (s *Store) AdoptSingleNode(node int32, dir string, nextProducerID int64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.img.with()
	changed := false
	for _, old := range s.img.topics() {
		if len(old.Replicas) == int(old.Partitions) {
			continue
		}
		t := old.clone()
		t.PreRaft = true
		t.Replicas, t.Dirs = make([][]int32, t.Partitions), make([]PartitionDirs, t.Partitions)
		for p := range t.Replicas {
			t.Replicas[p] = []int32{node}
			t.Dirs[p] = PartitionDirs{{Broker: node, Dir: dir}}
		}
		next.putTopic(&t)
		next.recount(old, &t)
		changed = true
	}
	if nextProducerID > next.st.NextProducerID {
		next.st.NextProducerID, changed = nextProducerID, true
	}
	if !changed {
		return false, nil
	}
	// Not in the metadata log (its one voter's store is the only state
	// there is): durable before it returns.
	prev := s.img
	s.setImage(next)
	if err := s.snapshotNowLocked(); err != nil {
		s.setImage(prev)
		return true, err
	}
	return true, nil
}
