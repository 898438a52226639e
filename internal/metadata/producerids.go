package metadata

import (
	"errors"
	"fmt"
	"math"
)

// Producer ids in a cluster are handed out in blocks committed through the
// metadata log, as Kafka's controller does (AllocateProducerIds, KIP-730):
// the controller proposes "block [start, start+len) goes to broker B", and
// a broker uses no id of a block before that entry is committed and
// applied. Every node's metadata therefore knows the next free id, a
// restarted broker gets a new block, and a broker whose disk was wiped
// gets the next block of the replicated log - never an id it or anyone
// handed out before. (Data directories of the format before this are
// refused at start-up, so no cluster has ids from the earlier per-node
// counters.)

// ErrStaleProducerIDBlock: a block proposal overlapping ids already given
// out (two proposals raced); the controller proposes again from the new
// next id.
var ErrStaleProducerIDBlock = errors.New("metadata: producer id block already given out")

// ProducerIDBlockStart is where the next block starts: the next free id.
func (s *Store) ProducerIDBlockStart() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.img.st.NextProducerID
}

// ProducerIDIssued reports whether id lies in a block this node's metadata
// says was given to some broker.
func (s *Store) ProducerIDIssued(id int64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return id >= 0 && id < s.img.st.NextProducerID
}

// ProducerIDFloor is the id below which no broker hands out one any more
// (0: none).
func (s *Store) ProducerIDFloor() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.img.st.ProducerIDFloor
}

func applyProducerIDs(next *state, c Command) error {
	if c.BrokerID == 0 && c.ProducerIDLen == 0 && c.ProducerIDStart > 0 {
		// A floor, not a block: a topic restored from the object store
		// installs producers with ids below ProducerIDStart, which no new
		// producer may get, from a new block or from one a broker holds.
		next.ProducerIDFloor = max(next.ProducerIDFloor, c.ProducerIDStart)
		next.NextProducerID = max(next.NextProducerID, c.ProducerIDStart)
		return nil
	}
	switch {
	case c.BrokerID <= 0 || c.ProducerIDLen <= 0 || c.ProducerIDStart < 0:
		return fmt.Errorf("metadata: bad producer id block %d+%d for broker %d", c.ProducerIDStart, c.ProducerIDLen, c.BrokerID)
	case c.ProducerIDStart > math.MaxInt64-c.ProducerIDLen:
		return fmt.Errorf("metadata: producer ids exhausted")
	case c.ProducerIDStart < next.NextProducerID:
		return fmt.Errorf("%w: block at %d, next free %d", ErrStaleProducerIDBlock, c.ProducerIDStart, next.NextProducerID)
	}
	next.NextProducerID = c.ProducerIDStart + c.ProducerIDLen
	return nil
}
