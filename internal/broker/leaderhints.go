package broker

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KIP-951: a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
// names its current leader and epoch (Produce v10+, Fetch v12+), and the
// response carries those leaders' endpoints (Produce v10+, Fetch v16+), so
// that the client redirects at once instead of refreshing its metadata
// first. Only a leader this node knows, registered and not fenced, is
// named.

// leaderHints collects the hints of one response.
type leaderHints struct {
	b        *Broker
	listener string
	seen     map[int32]bool
	brokers  []hintedBroker // each named leader once, for the response's Brokers
}

type hintedBroker struct {
	id   int32
	host string
	port int32
	rack *string
}

func (b *Broker) newLeaderHints(listener string) *leaderHints {
	return &leaderHints{b: b, listener: listener, seen: map[int32]bool{}}
}

// hint is the leader to name for partition i of topic answered with code.
func (h *leaderHints) hint(topic string, i int32, code int16) (leader, epoch int32, ok bool) {
	if code != kerr.NotLeaderForPartition.Code && code != kerr.FencedLeaderEpoch.Code {
		return -1, -1, false
	}
	b := h.b
	t, found := b.meta.Topic(topic)
	if !found {
		return -1, -1, false
	}
	st := b.replicas.State(t, i)
	if st.Err != 0 || st.Leader < 0 || st.Leader == b.cfg.NodeID {
		return -1, -1, false
	}
	br, found := b.meta.Broker(st.Leader)
	if !found || b.meta.Fenced(br.ID) {
		return -1, -1, false
	}
	ep, found := br.Endpoint(h.listener)
	if !found {
		return -1, -1, false
	}
	if !h.seen[br.ID] {
		h.seen[br.ID] = true
		hb := hintedBroker{id: br.ID, host: ep.Host, port: ep.Port}
		if br.Rack != "" {
			hb.rack = &br.Rack
		}
		h.brokers = append(h.brokers, hb)
	}
	return st.Leader, st.LeaderEpoch, true
}

// produceLeaderHints fills in the hints of a Produce response.
func (b *Broker) produceLeaderHints(version int16, resp *kmsg.ProduceResponse, listener string) {
	if version < 10 {
		return
	}
	h := b.newLeaderHints(listener)
	for ti := range resp.Topics {
		rt := &resp.Topics[ti]
		for pi := range rt.Partitions {
			sp := &rt.Partitions[pi]
			if leader, epoch, ok := h.hint(rt.Topic, sp.Partition, sp.ErrorCode); ok {
				sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = leader, epoch
			}
		}
	}
	for _, hb := range h.brokers {
		resp.Brokers = append(resp.Brokers, kmsg.ProduceResponseBroker{NodeID: hb.id, Host: hb.host, Port: hb.port, Rack: hb.rack})
	}
}

// fetchLeaderHints fills in the hints of a Fetch response.
func (b *Broker) fetchLeaderHints(version int16, resp *kmsg.FetchResponse, listener string) {
	if version < 12 || resp == nil {
		return
	}
	h := b.newLeaderHints(listener)
	for ti := range resp.Topics {
		rt := &resp.Topics[ti]
		name := rt.Topic
		if version >= 13 { // topics by id
			n, ok := b.meta.TopicName(rt.TopicID)
			if !ok {
				continue
			}
			name = n
		}
		for pi := range rt.Partitions {
			sp := &rt.Partitions[pi]
			if leader, epoch, ok := h.hint(name, sp.Partition, sp.ErrorCode); ok {
				sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = leader, epoch
			}
		}
	}
	if version >= 16 {
		for _, hb := range h.brokers {
			resp.Brokers = append(resp.Brokers, kmsg.FetchResponseBroker{NodeID: hb.id, Host: hb.host, Port: hb.port, Rack: hb.rack})
		}
	}
}
