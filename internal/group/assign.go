package group

import (
	"sort"
)

// The server-side assignors of KIP-848 (group.consumer.assignors): they map
// the active members' resolved subscriptions onto the subscribed topics'
// partitions. Both are deterministic for the same input.

// assign computes the target assignment with the named assignor. per is
// each active member's subscribed (existing) topics; topics their union.
func assign(name string, cg *consumerGroup, per map[string]map[string]bool, topics map[string]TopicInfo) map[string]assignment {
	out := make(map[string]assignment, len(per))
	for id := range per {
		out[id] = assignment{}
	}
	if len(per) == 0 {
		return out
	}
	names := make([]string, 0, len(topics))
	for n := range topics {
		names = append(names, n)
	}
	sort.Strings(names)
	switch name {
	case "range":
		assignRange(cg, per, topics, names, out)
	default:
		assignUniform(cg, per, topics, names, out)
	}
	return out
}

// assignRange gives each topic's members (those subscribed to it, static
// members first by instance id, then by member id) contiguous ranges of its
// partitions, the first ones one more when they do not divide evenly:
// members subscribed to the same topics get the same partition numbers of
// each (co-partitioning).
func assignRange(cg *consumerGroup, per map[string]map[string]bool, topics map[string]TopicInfo, names []string, out map[string]assignment) {
	ids := sortedMembers(cg, per)
	for _, n := range names {
		t := topics[n]
		var subs []string
		for _, id := range ids {
			if per[id][n] {
				subs = append(subs, id)
			}
		}
		if len(subs) == 0 {
			continue
		}
		quota, extra := int(t.Partitions)/len(subs), int(t.Partitions)%len(subs)
		next := int32(0)
		for i, id := range subs {
			k := quota
			if i < extra {
				k++
			}
			for j := 0; j < k; j++ {
				out[id].add(t.ID, next)
				next++
			}
		}
	}
}

func sortedMembers(cg *consumerGroup, per map[string]map[string]bool) []string {
	ids := make([]string, 0, len(per))
	for id := range per {
		ids = append(ids, id)
	}
	key := func(id string) (bool, string) {
		if m := cg.members[id]; m != nil && m.instanceID != nil {
			return false, *m.instanceID
		}
		return true, id
	}
	sort.Slice(ids, func(i, j int) bool {
		di, ki := key(ids[i])
		dj, kj := key(ids[j])
		if di != dj {
			return !di
		}
		return ki < kj
	})
	return ids
}

// assignUniform spreads all subscribed partitions as evenly as the
// subscriptions allow and is sticky: a member keeps the partitions of its
// current target that are still valid, up to its share, so a rebalance
// moves only what must move.
func assignUniform(cg *consumerGroup, per map[string]map[string]bool, topics map[string]TopicInfo, names []string, out map[string]assignment) {
	ids := sortedMembers(cg, per)
	byID := make(map[[16]byte]string, len(topics))
	total := 0
	for _, n := range names {
		t := topics[n]
		byID[t.ID] = n
		total += int(t.Partitions)
	}
	counts := map[string]int{}
	taken := map[tpKey]bool{}
	// 1. Keep what is still valid.
	for _, id := range ids {
		m := cg.members[id]
		if m == nil {
			continue
		}
		m.target.each(func(tid [16]byte, p int32) {
			n, ok := byID[tid]
			if !ok || !per[id][n] || p >= topics[n].Partitions || taken[tpKey{tid, p}] {
				return
			}
			taken[tpKey{tid, p}] = true
			out[id].add(tid, p)
			counts[id]++
		})
	}
	// 2. Shed what is over the share: the most loaded members may keep
	// one more than the floor.
	floor, extra := total/len(ids), total%len(ids)
	order := append([]string(nil), ids...)
	sort.SliceStable(order, func(i, j int) bool { return counts[order[i]] > counts[order[j]] })
	for i, id := range order {
		allowed := floor
		if i < extra {
			allowed++
		}
		for counts[id] > allowed {
			// Drop from the highest topic id / partition: deterministic.
			var last [16]byte
			found := false
			for tid := range out[id] {
				if !found || string(tid[:]) > string(last[:]) {
					last, found = tid, true
				}
			}
			ps := out[id][last]
			p := ps[len(ps)-1]
			if len(ps) == 1 {
				delete(out[id], last)
			} else {
				out[id][last] = ps[:len(ps)-1]
			}
			delete(taken, tpKey{last, p})
			counts[id]--
		}
	}
	// 3. Hand out the rest, each to the least loaded member subscribed
	// to its topic.
	for _, n := range names {
		t := topics[n]
		for p := int32(0); p < t.Partitions; p++ {
			if taken[tpKey{t.ID, p}] {
				continue
			}
			best := ""
			for _, id := range ids {
				if per[id][n] && (best == "" || counts[id] < counts[best]) {
					best = id
				}
			}
			if best == "" {
				continue
			}
			out[best].add(t.ID, p)
			counts[best]++
			taken[tpKey{t.ID, p}] = true
		}
	}
}
