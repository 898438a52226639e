package metadata

import (
	"fmt"
	"maps"
)

// Finalized feature levels (KIP-584), set by UpdateFeatures and committed
// through the metadata log as Kafka's FeatureLevelRecord, so every node
// finalizes the same levels and a restart keeps them. A feature the log
// never set is at the binary's default level (the broker's feature table).

// OpFeatures sets Command.Features: name -> finalized level.
const OpFeatures = "features"

// MaxFeatures bounds how many features the metadata may name.
const MaxFeatures = 32

// FeatureLevels returns the levels UpdateFeatures set (a copy); features
// not in it are at their default.
func (s *Store) FeatureLevels() map[string]int16 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.img.st.Features)
}

// FeatureLevel returns the level UpdateFeatures set for name, if any.
func (s *Store) FeatureLevel(name string) (int16, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.img.st.Features[name]
	return l, ok
}

// applyFeatures applies OpFeatures; handled is false for other commands.
// The proposer validated the levels against what the brokers support.
func applyFeatures(next *state, c Command) (handled bool, err error) {
	if c.Op != OpFeatures {
		return false, nil
	}
	if len(c.Features) == 0 {
		return true, fmt.Errorf("metadata: %s without features", c.Op)
	}
	fs := maps.Clone(next.Features)
	if fs == nil {
		fs = map[string]int16{}
	}
	for name, level := range c.Features {
		if name == "" || level < 0 {
			return true, fmt.Errorf("metadata: feature %q level %d", name, level)
		}
		fs[name] = level
	}
	if len(fs) > MaxFeatures {
		return true, fmt.Errorf("metadata: more than %d features", MaxFeatures)
	}
	next.Features = fs
	return true, nil
}
