package metadata

import (
	"errors"
	"slices"
)

// Reassignment is one partition being moved to Target. Original is its
// replica set before the move, which a cancellation returns to.
type Reassignment struct {
	Partition int32
	Target    []int32
	Original  []int32
}

// Adding are the target replicas the partition did not have.
func (r Reassignment) Adding() []int32 { return minus(r.Target, r.Original) }

// Removing are the original replicas the target does not keep.
func (r Reassignment) Removing() []int32 { return minus(r.Original, r.Target) }

// Errors of reassignment commands; callers map them onto Kafka codes.
var (
	ErrUnknownPartition    = errors.New("metadata: unknown partition")
	ErrInvalidAssignment   = errors.New("metadata: invalid replica assignment")
	ErrNoReassignment      = errors.New("metadata: no reassignment in progress")
	ErrReassignInProgress  = errors.New("metadata: a reassignment of this partition is in progress")
	ErrStaleReassignFinish = errors.New("metadata: the reassignment being completed is not the current one")
)

// MaxReplicas bounds a partition's replica set (a target, and the union
// during a move is at most twice that).
const MaxReplicas = 32

// InitialReplicas is the voter set partition i's Raft group was created
// with (see Topic.Initial).
func (t Topic) InitialReplicas(i int32) []int32 {
	if int(i) < len(t.Initial) {
		return t.Initial[i]
	}
	if int(i) < len(t.Replicas) {
		return t.Replicas[i]
	}
	return nil
}

// Reassignment returns partition i's ongoing reassignment.
func (t Topic) Reassignment(i int32) (Reassignment, bool) {
	for _, r := range t.Reassigning {
		if r.Partition == i {
			return r, true
		}
	}
	return Reassignment{}, false
}

// ValidateTarget checks a target replica set against the registered
// brokers: not empty, no duplicates, every id registered.
func ValidateTarget(brokers []BrokerInfo, target []int32) error {
	if len(target) == 0 || len(target) > MaxReplicas {
		return ErrInvalidAssignment
	}
	for i, id := range target {
		if slices.Contains(target[:i], id) {
			return ErrInvalidAssignment
		}
		if !slices.ContainsFunc(brokers, func(b BrokerInfo) bool { return b.ID == id }) {
			return ErrInvalidAssignment
		}
	}
	return nil
}

// SameSet reports whether a and b hold the same ids (order aside).
func SameSet(a, b []int32) bool {
	return len(a) == len(b) && len(minus(a, b)) == 0
}

func minus(a, b []int32) []int32 {
	out := []int32{}
	for _, id := range a {
		if !slices.Contains(b, id) {
			out = append(out, id)
		}
	}
	return out
}

// applyReassign is OpReassign: start moving c.Partition of t to c.Target,
// or (Target nil) cancel the ongoing move by making the original set its
// target again. The partition's Raft leader does the membership changes
// and reports with OpReassignDone.
func applyReassign(next *state, t *Topic, c Command) error {
	p := c.Partition
	if p < 0 || p >= t.Partitions || int(p) >= len(t.Replicas) {
		return ErrUnknownPartition
	}
	ri := slices.IndexFunc(t.Reassigning, func(r Reassignment) bool { return r.Partition == p })
	if c.Target == nil {
		if ri < 0 {
			return ErrNoReassignment
		}
		t.Reassigning[ri].Target = slices.Clone(t.Reassigning[ri].Original)
		return nil
	}
	if err := ValidateTarget(next.Brokers, c.Target); err != nil {
		return err
	}
	if ri >= 0 {
		return ErrReassignInProgress
	}
	if t.Initial == nil {
		t.Initial = cloneSets(t.Replicas)
	}
	cur := t.Replicas[p]
	if SameSet(cur, c.Target) {
		t.Replicas[p] = slices.Clone(c.Target) // only the order (preferred leader) changes
		return nil
	}
	t.Reassigning = append(t.Reassigning, Reassignment{Partition: p, Target: slices.Clone(c.Target), Original: slices.Clone(cur)})
	// Kafka's order: the target first, then the replicas being removed.
	t.Replicas[p] = append(slices.Clone(c.Target), minus(cur, c.Target)...)
	return nil
}

// applyReassignDone is OpReassignDone: the partition's Raft voters equal
// c.Target, so the replica set becomes the target. A report for a target
// that is no longer current (cancelled meanwhile) is refused.
func applyReassignDone(t *Topic, c Command) error {
	ri := slices.IndexFunc(t.Reassigning, func(r Reassignment) bool { return r.Partition == c.Partition })
	if ri < 0 || !SameSet(t.Reassigning[ri].Target, c.Target) {
		return ErrStaleReassignFinish
	}
	t.Replicas[c.Partition] = t.Reassigning[ri].Target
	t.Reassigning = slices.Delete(t.Reassigning, ri, ri+1)
	if len(t.Reassigning) == 0 {
		t.Reassigning = nil
	}
	return nil
}
