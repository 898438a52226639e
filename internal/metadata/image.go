package metadata

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
)

// Image is the cluster metadata at one applied offset of the metadata log
// (KRaft's MetadataImage). It is immutable: Apply returns a new image that
// shares everything the command did not touch - the topic indexes are
// persistent maps (pmap.go) and a changed topic is a new *Topic - so the
// cost of a command does not grow with the cluster, and a snapshot can be
// encoded from an image while later commands apply.
//
// The image is what a snapshot holds (snapshot.go); the metadata log after
// the snapshot's offset is the rest of the record.
type Image struct {
	st     state // Topics is nil: the topics are in names and ids
	names  pmap[string]
	ids    pmap[[16]byte]
	sorted *sortedTopics
	// replicas counts the partition replicas each broker holds (while a
	// partition moves, both its old and new replicas): derived, never
	// persisted; replaced whole (a map per broker count, not per
	// partition) by a command that changes it.
	replicas map[int32]int
}

// sortedTopics is an image's topics by name, built once on first use by a
// reader (the apply path never sorts).
type sortedTopics struct {
	once sync.Once
	v    []*Topic
}

// Delta is what one command changed (KRaft's MetadataDelta, for one
// record): the listeners of a change - this node's replicas, the security
// and quota caches - act on it rather than on the whole image.
type Delta struct {
	Op string
	// Topic is the topic the command created, changed or deleted, as it
	// is after the command (as it was, for a delete); nil when the
	// command touched no topic. Shared with the image: read-only.
	Topic *Topic
}

// newImage is the image of a decoded snapshot.
func newImage(st state) *Image {
	im := &Image{sorted: &sortedTopics{}, replicas: map[int32]int{}}
	for i := range st.Topics {
		t := st.Topics[i]
		im.names = im.names.set(t.Name, &t)
		im.ids = im.ids.set(t.ID, &t)
		countReplicas(im.replicas, &t, 1)
	}
	st.Topics = nil
	im.st = st
	return im
}

// state is the image in its persisted form: a snapshot.
func (im *Image) state() state {
	st := im.st
	ts := im.topics()
	st.Topics = make([]Topic, len(ts))
	for i, t := range ts {
		st.Topics[i] = *t
	}
	return st
}

// Applied is the end offset of the last metadata-log entry in the image.
func (im *Image) Applied() int64 { return im.st.Applied }

// Topic is the named topic, shared with the image: read-only.
func (im *Image) Topic(name string) (*Topic, bool) { return im.names.get(name) }

// TopicByID is the topic with id, shared with the image: read-only.
func (im *Image) TopicByID(id [16]byte) (*Topic, bool) { return im.ids.get(id) }

// ReplicaCount is the number of partition replicas broker holds
// (max.broker.partitions counts these).
func (im *Image) ReplicaCount(broker int32) int { return im.replicas[broker] }

// countReplicas adds sign times t's replicas to counts.
func countReplicas(counts map[int32]int, t *Topic, sign int) {
	for _, rs := range t.Replicas {
		for _, r := range rs {
			counts[r] += sign
		}
	}
}

// recount replaces the replica counts for old becoming new (either nil).
func (im *Image) recount(old, new *Topic) {
	c := maps.Clone(im.replicas)
	if old != nil {
		countReplicas(c, old, -1)
	}
	if new != nil {
		countReplicas(c, new, 1)
	}
	im.replicas = c
}

// TopicCount is the number of topics.
func (im *Image) TopicCount() int { return im.names.len() }

// topics are the image's topics sorted by name, shared: read-only.
func (im *Image) topics() []*Topic {
	im.sorted.once.Do(func() {
		v := make([]*Topic, 0, im.names.len())
		im.names.each(func(t *Topic) { v = append(v, t) })
		sort.Slice(v, func(i, j int) bool { return v[i].Name < v[j].Name })
		im.sorted.v = v
	})
	return im.sorted.v
}

// with returns a copy of im to change (the indexes are persistent: a
// change to the copy's never reaches im's).
func (im *Image) with() *Image {
	next := *im
	next.sorted = &sortedTopics{}
	return &next
}

func (im *Image) putTopic(t *Topic) {
	im.names = im.names.set(t.Name, t)
	im.ids = im.ids.set(t.ID, t)
}

func (im *Image) dropTopic(t *Topic) {
	im.names = im.names.del(t.Name)
	im.ids = im.ids.del(t.ID)
}

// Apply is the image after the committed command c whose log entry ends
// at end, and what changed. A command that cannot apply (a topic created
// twice by racing proposals) fails the same way on every node and changes
// nothing but the applied offset: the returned image is then im at end.
// Apply is pure: no I/O, nothing of im changes.
func (im *Image) Apply(end int64, c Command) (*Image, Delta, error) {
	next := im.with()
	d := Delta{Op: c.Op}
	if err := next.applyTo(c, &d); err != nil {
		next = im.with()
		next.st.Applied = end
		return next, Delta{Op: c.Op}, err
	}
	next.st.Applied = end
	return next, d, nil
}

func (next *Image) applyTo(c Command, d *Delta) error {
	if handled, err := next.applyTopicCommand(c, d); handled {
		return err
	}
	if handled, err := next.applyClusterCommand(c); handled {
		return err
	}
	st := &next.st
	if handled, err := applySecurity(st, c); handled {
		return err
	}
	if handled, err := applyQuotas(st, c); handled {
		return err
	}
	if handled, err := applyGroupConfigs(st, c); handled {
		return err
	}
	if handled, err := applyFeatures(st, c); handled {
		return err
	}
	return fmt.Errorf("metadata: unknown metadata command %q", c.Op)
}

// applyTopicCommand applies the commands that create, change or delete a
// topic (reporting it in d); handled is false for any other command.
func (next *Image) applyTopicCommand(c Command, d *Delta) (handled bool, err error) {
	st := &next.st
	// A topic the command changes: a shallow copy to change. Its slices
	// and maps are shared with the old image: replace them, never write
	// into them (topicChange below; reassign clones what it edits).
	change := func(name string) (*Topic, error) {
		old, ok := next.names.get(name)
		if !ok {
			return nil, ErrUnknownTopic
		}
		t := *old
		return &t, nil
	}
	switch c.Op {
	case OpCreateTopic:
		t := c.Topic
		if t == nil || t.Partitions <= 0 || len(t.Replicas) != int(t.Partitions) {
			return true, ErrInvalidCount
		}
		if _, dup := next.names.get(t.Name); dup {
			return true, ErrTopicExists
		}
		if _, dup := next.ids.get(t.ID); dup {
			return true, ErrTopicExists
		}
		nt := t.clone()
		nt.Dirs = nil
		recordDirs(st, &nt, 0)
		next.putTopic(&nt)
		next.recount(nil, &nt)
		d.Topic = &nt
	case OpDeleteTopic:
		t, ok := next.names.get(c.Name)
		if !ok {
			return true, ErrUnknownTopic
		}
		next.dropTopic(t)
		next.recount(t, nil)
		st.Deleting = append(slices.Clip(st.Deleting), *t)
		if t.Configs["remote.storage.enable"] == "true" {
			// Its objects go too (internal/tiered): recorded here first.
			st.RemoteDeleting = append(slices.Clip(st.RemoteDeleting), *t)
		}
		d.Topic = t
	case OpAddPartitions:
		t, err := change(c.Name)
		if err != nil {
			return true, err
		}
		if c.Partitions <= t.Partitions || int(c.Partitions-t.Partitions) != len(c.Replicas) {
			return true, ErrInvalidCount
		}
		old := t.Partitions
		t.Partitions = c.Partitions
		// Clip: the old image's slices keep their length; appending
		// copies the outer slices, the existing partitions' entries are
		// shared.
		t.Replicas = append(slices.Clip(t.Replicas), cloneSets(c.Replicas)...)
		t.Dirs = slices.Clip(t.Dirs)
		recordDirs(st, t, old)
		next.putTopic(t)
		next.recount(nil, &Topic{Replicas: c.Replicas}) // the new partitions'

		d.Topic = t
	case OpTopicConfigs:
		t, err := change(c.Name)
		if err != nil {
			return true, err
		}
		t.Configs = maps.Clone(c.Configs)
		if t.Configs == nil {
			t.Configs = map[string]string{}
		}
		next.putTopic(t)
		d.Topic = t
	case OpReassign, OpReassignDone:
		old, ok := next.names.get(c.Name)
		if !ok {
			return true, ErrUnknownTopic
		}
		// A move edits the replica sets in place: a deep copy of this
		// topic (its partitions only).
		t := old.clone()
		var err error
		if c.Op == OpReassign {
			if err = applyReassign(st, &t, c); err == nil {
				recordDirs(st, &t, 0)
			}
		} else {
			err = applyReassignDone(&t, c)
		}
		if err != nil {
			return true, err
		}
		next.putTopic(&t)
		next.recount(old, &t)
		d.Topic = &t
	default:
		return false, nil
	}
	return true, nil
}

// applyClusterCommand applies the commands about the cluster and its
// brokers: its id, registrations, fencing, broker configs, producer-id
// blocks; handled is false for any other command.
func (next *Image) applyClusterCommand(c Command) (handled bool, err error) {
	st := &next.st
	switch c.Op {
	case OpInit:
		if c.ClusterID == "" {
			return true, fmt.Errorf("metadata: init without a cluster id")
		}
		st.ClusterID = c.ClusterID
	case OpRegister:
		if c.Broker == nil {
			return true, fmt.Errorf("metadata: register without a broker")
		}
		bs := slices.DeleteFunc(slices.Clone(st.Brokers), func(b BrokerInfo) bool { return b.ID == c.Broker.ID })
		bs = append(bs, *c.Broker)
		sort.Slice(bs, func(i, j int) bool { return bs[i].ID < bs[j].ID })
		st.Brokers = bs
	case OpBrokerConfigs:
		// Name is the scope: "" the cluster-wide default, else a broker
		// id; Configs its whole new set (empty: none).
		st.BrokerConfigs = maps.Clone(st.BrokerConfigs)
		if len(c.Configs) == 0 {
			delete(st.BrokerConfigs, c.Name)
		} else {
			if st.BrokerConfigs == nil {
				st.BrokerConfigs = map[string]map[string]string{}
			}
			st.BrokerConfigs[c.Name] = maps.Clone(c.Configs)
		}
	case OpUnregister:
		inUse := false
		next.names.each(func(t *Topic) {
			for _, rs := range t.Replicas {
				if slices.Contains(rs, c.BrokerID) {
					inUse = true
				}
			}
		})
		if inUse {
			return true, ErrBrokerInUse
		}
		st.Brokers = slices.DeleteFunc(slices.Clone(st.Brokers), func(b BrokerInfo) bool { return b.ID == c.BrokerID })
	case OpFence, OpUnfence:
		if len(c.IDs) == 0 {
			return true, fmt.Errorf("metadata: %s without broker ids", c.Op)
		}
		fenced := slices.DeleteFunc(slices.Clone(st.Fenced), func(id int32) bool { return slices.Contains(c.IDs, id) })
		if c.Op == OpFence {
			fenced = append(fenced, c.IDs...)
			slices.Sort(fenced)
			fenced = slices.Compact(fenced)
		}
		st.Fenced = fenced
	case OpAllocateProducerIDs:
		return true, applyProducerIDs(st, c)
	default:
		return false, nil
	}
	return true, nil
}
