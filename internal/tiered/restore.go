package tiered

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"holdfast/internal/metadata"
	"holdfast/internal/partition"
	"holdfast/internal/topicconfig"
)

// Restore from the bucket alone (docs/tiered-storage.md, Restore). A topic
// created with remote.storage.restore.from=<topic>-<topic id> takes its
// partition count and, per partition, the end of the remote log its old
// incarnation left in the bucket (PlanRestore, when the topic is created:
// remote.storage.restore.starts). Each partition's Raft group starts its
// log at that end (raft.GroupConfig.StartOffset), so offsets are never
// reused; its leader then commits, before any upload, a manifest rebuilt
// from the objects' .index sidecars (restore), so that reads below the
// local log start are served from the old objects, under their old keys.

// idLen is the length of a topic id in a key (base64, raw URL encoding).
const idLen = 22

// maxRestoreObjects bounds the keys a restore lists under one topic.
const maxRestoreObjects = 4 * maxManifestSegments * 16

// maxRestorePartitions bounds the partition count a sidecar can make a
// restore plan (a damaged or hostile object): the broker's own limit for
// one topic (createtopics.go) refuses more anyway.
const maxRestorePartitions = 10000

// SplitDir splits a key directory <topic>-<topic id>.
func SplitDir(dir string) (name, id string, ok bool) {
	if len(dir) < idLen+2 || dir[len(dir)-idLen-1] != '-' || strings.Contains(dir, "/") {
		return "", "", false
	}
	return dir[:len(dir)-idLen-1], dir[len(dir)-idLen:], true
}

// PlanRestore resolves from (a key directory <topic>-<topic id>, or a
// topic name whose objects are under exactly one such directory) and
// returns the directory and, per partition (0 to the highest with
// objects), the end of the remote log the objects hold, where the
// restored partition's log starts, and the highest leader epoch in it,
// which new leaders' epochs must pass. maxProducerID is the highest
// producer id in the producer states the restore installs (-1: none):
// the new cluster must hand out no id up to it.
func (m *Manager) PlanRestore(ctx context.Context, from string) (dir string, starts []topicconfig.RestoreStart, maxProducerID int64, err error) {
	maxProducerID = -1
	if _, _, ok := SplitDir(from); ok {
		dir = from
	} else {
		keys, err := m.store.List(ctx, m.cfg.Prefix+from+"-")
		if err != nil {
			return "", nil, -1, fmt.Errorf("listing the object store: %w", err)
		}
		dirs := map[string]bool{}
		for _, k := range keys {
			d, _, _ := strings.Cut(strings.TrimPrefix(k, m.cfg.Prefix), "/")
			if name, _, ok := SplitDir(d); ok && name == from {
				dirs[d] = true
			}
		}
		switch len(dirs) {
		case 0:
			return "", nil, -1, fmt.Errorf("the object store holds no objects of a topic %q under prefix %q", from, m.cfg.Prefix)
		case 1:
			for d := range dirs {
				dir = d
			}
		default:
			all := make([]string, 0, len(dirs))
			for d := range dirs {
				all = append(all, d)
			}
			slices.Sort(all)
			return "", nil, -1, fmt.Errorf("the object store holds several incarnations of topic %q: name one of %s", from, strings.Join(all, ", "))
		}
	}
	parts, err := m.listRestore(ctx, dir)
	if err != nil {
		return "", nil, -1, err
	}
	if len(parts) == 0 {
		return "", nil, -1, fmt.Errorf("the object store holds no segments under %s%s/", m.cfg.Prefix, dir)
	}
	// As many partitions as the uploads recorded the topic had, and at
	// least up to the highest with objects: a partition that never
	// uploaded starts empty at offset 0.
	n := int32(0)
	found := map[int32]topicconfig.RestoreStart{}
	for part, segs := range parts {
		mf, prod, topicParts, err := m.restoredChain(ctx, dir, part, segs, -1)
		if err != nil {
			return "", nil, -1, err
		}
		n = max(n, part+1, min(topicParts, maxRestorePartitions))
		found[part] = topicconfig.RestoreStart{Offset: mf.End(), Epoch: mf.maxEpoch()}
		if prod != nil {
			maxProducerID = max(maxProducerID, prod.MaxProducerID())
		}
	}
	starts = make([]topicconfig.RestoreStart, n)
	for part, st := range found {
		starts[part] = st
	}
	return dir, starts, maxProducerID, nil
}

// restoreKey is one segment found under a directory: its partition, base
// offset and uploader's epoch, from its key.
type restoreKey struct {
	base  int64
	epoch int32
}

// listRestore lists dir's segments that have both objects, by partition.
func (m *Manager) listRestore(ctx context.Context, dir string) (map[int32][]restoreKey, error) {
	prefix := m.cfg.Prefix + dir + "/"
	keys, err := m.store.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", prefix, err)
	}
	if len(keys) > maxRestoreObjects {
		return nil, fmt.Errorf("%s holds %d objects, more than a restore reads (%d)", prefix, len(keys), maxRestoreObjects)
	}
	have := map[string]bool{}
	for _, k := range keys {
		have[k] = true
	}
	parts := map[int32][]restoreKey{}
	for _, k := range keys {
		rest, ok := strings.CutSuffix(strings.TrimPrefix(k, prefix), ".index")
		if !ok || !have[prefix+rest+".log"] {
			continue // a .log, or a segment whose upload did not finish
		}
		ps, name, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		bs, es, ok := strings.Cut(name, "-")
		part, perr := strconv.ParseInt(ps, 10, 32)
		base, berr := strconv.ParseInt(bs, 10, 64)
		epoch, eerr := strconv.ParseInt(es, 10, 32)
		if !ok || perr != nil || berr != nil || eerr != nil || part < 0 || part >= 10000 || base < 0 {
			continue // not a segment's key
		}
		parts[int32(part)] = append(parts[int32(part)], restoreKey{base: base, epoch: int32(epoch)})
	}
	return parts, nil
}

// restoredManifest reads the .index sidecars of one partition's segments
// and chains them into a manifest: back from the segment that ends
// highest (end >= 0: from the one that ends at end), each predecessor
// the segment ending where it begins (the highest epoch when several
// do). Overlapping copies of the same offsets (two leaders' uploads, one
// never committed) hold the same committed records, so any chain is
// true; below a gap the objects are of a remote log that was abandoned
// (its offsets deleted locally before being uploaded) and are left out.
//
// It also returns the producer snapshot of the chain's last segment (nil
// if it has none).
func (m *Manager) restoredManifest(ctx context.Context, dir string, part int32, keys []restoreKey, end int64) (Manifest, *partition.ProducerState, error) {
	mf, prod, _, err := m.restoredChain(ctx, dir, part, keys, end)
	return mf, prod, err
}

// restoredChain is restoredManifest, and the topic's partition count the
// segments' sidecars recorded (the largest: a topic's partitions only
// grow; 0 if none did).
func (m *Manager) restoredChain(ctx context.Context, dir string, part int32, keys []restoreKey, end int64) (Manifest, *partition.ProducerState, int32, error) {
	_, id, _ := SplitDir(dir)
	var segs []Segment
	var topicParts int32
	for _, k := range keys {
		key := fmt.Sprintf("%s%s/%d/%020d-%d.index", m.cfg.Prefix, dir, part, k.base, k.epoch)
		b, err := m.store.Get(ctx, key, maxSidecar)
		if err != nil {
			return Manifest{}, nil, 0, fmt.Errorf("reading %s: %w", key, err)
		}
		var sc sidecar
		if err := json.Unmarshal(b, &sc); err != nil {
			return Manifest{}, nil, 0, fmt.Errorf("%s: %w", key, err)
		}
		topicParts = max(topicParts, sc.Partitions)
		s := sc.Segment
		if sc.TopicID != id || sc.Partition != part || s.Base != k.base || s.Epoch != k.epoch || s.Next <= s.Base || s.Size < 0 {
			return Manifest{}, nil, 0, fmt.Errorf("%s does not describe the segment its key names", key)
		}
		s.Dir = dir
		segs = append(segs, s)
	}
	// Highest end first; among equal ends the highest epoch.
	slices.SortFunc(segs, func(a, b Segment) int {
		if a.Next != b.Next {
			return cmp.Compare(b.Next, a.Next)
		}
		return cmp.Compare(b.Epoch, a.Epoch)
	})
	var chain []Segment
	for _, s := range segs {
		switch {
		case len(chain) == 0 && (end < 0 || s.Next == end):
			chain = append(chain, s)
		case len(chain) > 0 && s.Next == chain[len(chain)-1].Base:
			chain = append(chain, s)
		}
		if len(chain) > maxManifestSegments {
			return Manifest{}, nil, 0, fmt.Errorf("partition %d of %s has more than %d segments", part, dir, maxManifestSegments)
		}
	}
	if end > 0 && len(chain) == 0 {
		return Manifest{}, nil, 0, fmt.Errorf("partition %d of %s: no segment ends at %d", part, dir, end)
	}
	var prod *partition.ProducerState
	if len(chain) > 0 {
		var err error
		if prod, err = m.readProducers(ctx, m.key(metadata.Topic{}, part, chain[0])); err != nil {
			return Manifest{}, nil, 0, err
		}
		if prod != nil && prod.End != chain[0].Next {
			prod = nil
		}
	}
	slices.Reverse(chain)
	mf := Manifest{Segments: chain}
	if len(chain) > 0 {
		mf.Start = chain[0].Base
	}
	return mf, prod, topicParts, nil
}

// restore commits p's restored manifest, once, before anything else of
// its remote log: it reports whether the task may go on with p (not a
// restored topic, or its manifest committed).
func (m *Manager) restore(p *partition.Partition, t metadata.Topic, st *partState) bool {
	dir := t.Configs["remote.storage.restore.from"]
	start := topicconfig.RestoreStartOf(t.Configs, p.Index()).Offset
	m.mu.Lock()
	has := st.cmdOffset >= 0
	m.mu.Unlock()
	if dir == "" || start == 0 || has {
		return true
	}
	ctx, cancel := context.WithTimeout(m.ctx, 5*time.Minute)
	defer cancel()
	parts, err := m.listRestore(ctx, dir)
	var mf Manifest
	var prod *partition.ProducerState
	if err == nil {
		mf, prod, err = m.restoredManifest(ctx, dir, p.Index(), parts[p.Index()], start)
	}
	if err == nil && prod != nil {
		// Only ids below the producer id floor the topic's creation
		// committed: no new producer is given those (a floor that did not
		// cover an id would let a new producer's batches be judged by
		// the restored state).
		if dropped := prod.DropFrom(m.meta.ProducerIDFloor()); dropped > 0 {
			m.log.Warn("restored producer ids above the producer id floor are not restored", "topic", t.Name, "partition", p.Index(), "producers", dropped)
		}
	}
	if err == nil && prod != nil && prod.Len() > 0 {
		// The producers first (a Raft command every replica applies):
		// installed again if the manifest's commit fails, which changes
		// nothing (only unknown producers are installed).
		var cmd []byte
		if cmd, err = partition.RestoreProducersCommand(*prod); err == nil {
			err = m.commitCommand(ctx, p, cmd)
		}
	}
	if err == nil {
		err = m.change(ctx, p, st, func(cur Manifest) (Manifest, bool) {
			return mf, len(cur.Segments) == 0 && cur.Start == 0
		})
	}
	if err != nil {
		m.log.Warn("tiered storage: restoring the remote log from the object store; retrying", "topic", t.Name, "partition", p.Index(), "from", dir, "err", err)
		return false
	}
	m.log.Info("remote log restored from the object store", "topic", t.Name, "partition", p.Index(), "from", dir,
		"segments", len(mf.Segments), "remote_log_start_offset", mf.Start, "end_offset", mf.End(), "producers", producerCount(prod))
	return true
}

// maxEpoch is the highest leader epoch of mf's records and uploaders.
func (mf Manifest) maxEpoch() int32 {
	var e int32
	for _, s := range mf.Segments {
		e = max(e, s.Epoch)
		for _, se := range s.Epochs {
			e = max(e, int32(se[0]))
		}
	}
	return e
}

// RestorePending reports whether p belongs to a restored topic whose
// manifest is not committed yet: its offsets below the restored start
// exist but cannot be read yet. Fetches wait and ListOffsets' earliest
// answers a retriable error meanwhile, so that no consumer resets past
// the restored records.
func (m *Manager) RestorePending(p *partition.Partition) bool {
	if m == nil {
		return false
	}
	t, ok := m.topicFor(p)
	if !ok || t.Configs["remote.storage.restore.from"] == "" || topicconfig.RestoreStartOf(t.Configs, p.Index()).Offset == 0 {
		return false
	}
	st, err := m.refresh(p)
	if err != nil {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return st.cmdOffset < 0
}

func producerCount(s *partition.ProducerState) int {
	if s == nil {
		return 0
	}
	return s.Len()
}
