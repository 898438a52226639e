package metadata

import (
	"fmt"
	"maps"
)

// Group configs (KIP-848's and KIP-932's dynamic per-group configs, the
// GROUP config resource) live in the metadata, as Kafka's ConfigRecords
// of resource type GROUP do, so every node (a share partition's leader
// as well as the group's coordinator) reads the same committed values.

// OpGroupConfigs replaces Command.Name's group config overrides with
// Command.Configs (empty: none).
const OpGroupConfigs = "group_configs"

// MaxConfiguredGroups bounds how many groups may have config overrides.
const MaxConfiguredGroups = 100000

// GroupConfigs is group's config overrides (nil if none).
func (s *Store) GroupConfigs(group string) map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.img.st.GroupConfigs[group])
}

// applyGroupConfigs applies OpGroupConfigs; handled is false for other
// commands.
func applyGroupConfigs(next *state, c Command) (handled bool, err error) {
	if c.Op != OpGroupConfigs {
		return false, nil
	}
	if c.Name == "" {
		return true, fmt.Errorf("metadata: group configs without a group")
	}
	gc := maps.Clone(next.GroupConfigs)
	if gc == nil {
		gc = map[string]map[string]string{}
	}
	if len(c.Configs) == 0 {
		delete(gc, c.Name)
	} else {
		if _, ok := gc[c.Name]; !ok && len(gc) >= MaxConfiguredGroups {
			return true, fmt.Errorf("metadata: more than %d groups with configs", MaxConfiguredGroups)
		}
		gc[c.Name] = maps.Clone(c.Configs)
	}
	next.GroupConfigs = gc
	return true, nil
}
