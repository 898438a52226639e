package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/cluster"
	"holdfast/internal/raft"
	"holdfast/internal/wire"
)

// ElectLeaders (KIP-183, KIP-460). Kafka clients send it to the controller;
// here any node answers. A partition's leader is its Raft leader and its
// preferred leader is the first replica, so a preferred election is a Raft
// leadership transfer to that replica. A node that replicates the partition
// does it itself (the Raft leader decides; a follower sends the request on
// to the leader); a node that does not forwards the partition to one that
// does.
//
// Raft elects only replicas holding every committed entry, so there is no
// unclean election: UNCLEAN gets ELECTION_NOT_NEEDED when a leader exists
// and ELIGIBLE_LEADERS_NOT_AVAILABLE when none does.

const (
	electPreferred int8 = 0
	electUnclean   int8 = 1
)

// Bounds of the wait for transfers: a request timeout of 0 or less gets
// the default, and no request holds a connection longer than the maximum.
const (
	electDefaultWait = 30 * time.Second
	electMaxWait     = 5 * time.Minute
	// electPoll is how often the wait looks at leadership: Raft has no
	// leader-change notification, and a transfer takes a few round trips.
	electPoll = 20 * time.Millisecond
)

// topicPartition names a partition (a map key).
type topicPartition struct {
	topic     string
	partition int32
}

func (b *Broker) handleElectLeaders(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ElectLeadersRequest)
	resp := req.ResponseKind().(*kmsg.ElectLeadersResponse)
	typ := electPreferred
	if req.Version >= 1 {
		typ = req.ElectionType
	}
	all := req.Topics == nil
	var tps []topicPartition
	if all {
		for _, t := range b.meta.Topics() {
			for i := int32(0); i < t.Partitions; i++ {
				tps = append(tps, topicPartition{t.Name, i})
			}
		}
	} else {
		seen := map[topicPartition]bool{} // a partition named twice is elected once
		for _, rt := range req.Topics {
			for _, p := range rt.Partitions {
				if tp := (topicPartition{rt.Topic, p}); !seen[tp] {
					seen[tp] = true
					tps = append(tps, tp)
				}
			}
		}
	}
	if !b.forwardedBy(r) && !b.authorizeCluster(r, auth.OpAlter) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		err := errCode(kerr.ClusterAuthorizationFailed, "%s", kerr.ClusterAuthorizationFailed.Description)
		return wire.Respond(electResponse(resp, tps, slices.Repeat([]error{err}, len(tps)), false))
	}
	if typ != electPreferred && typ != electUnclean {
		resp.ErrorCode = kerr.InvalidRequest.Code
		err := errCode(kerr.InvalidRequest, "unknown election type %d", typ)
		return wire.Respond(electResponse(resp, tps, slices.Repeat([]error{err}, len(tps)), false))
	}
	wait := time.Duration(req.TimeoutMillis) * time.Millisecond
	if wait <= 0 {
		wait = electDefaultWait
	}
	wait = min(wait, electMaxWait)
	forwarded := b.forwardedBy(r)
	return func(ctx context.Context) kmsg.Response {
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		return electResponse(resp, tps, b.electLeaders(ctx, tps, typ, forwarded), all)
	}
}

// electResponse fills resp with one result per partition, grouped by topic
// in request order. For a request over every partition (null topics) Kafka
// leaves out the partitions whose preferred leader already leads.
func electResponse(resp *kmsg.ElectLeadersResponse, tps []topicPartition, errs []error, all bool) *kmsg.ElectLeadersResponse {
	idx := map[string]int{}
	for i, tp := range tps {
		code, msg := kafkaError(errs[i])
		if all && code == kerr.ElectionNotNeeded.Code {
			continue
		}
		j, ok := idx[tp.topic]
		if !ok {
			j = len(resp.Topics)
			idx[tp.topic] = j
			rt := kmsg.NewElectLeadersResponseTopic()
			rt.Topic = tp.topic
			resp.Topics = append(resp.Topics, rt)
		}
		rp := kmsg.NewElectLeadersResponseTopicPartition()
		rp.Partition = tp.partition
		rp.ErrorCode, rp.ErrorMessage = code, msg
		resp.Topics[j].Partitions = append(resp.Topics[j].Partitions, rp)
	}
	return resp
}

// electLeaders runs the elections and returns one result per partition.
func (b *Broker) electLeaders(ctx context.Context, tps []topicPartition, typ int8, forwarded bool) []error {
	errs := make([]error, len(tps))
	var waits []electWait
	fwd := map[string][]int{} // by candidate brokers, joined: partitions to forward
	var cands [][]int32
	for i, tp := range tps {
		t, ok := b.meta.Topic(tp.topic)
		if !ok || tp.partition < 0 || tp.partition >= t.Partitions {
			errs[i] = errCode(kerr.UnknownTopicOrPartition, "This server does not host this topic-partition.")
			continue
		}
		if int(tp.partition) >= len(t.Replicas) || len(t.Replicas[tp.partition]) == 0 {
			errs[i] = errCode(kerr.UnknownTopicOrPartition, "partition %d of %s has no replicas", tp.partition, tp.topic)
			continue
		}
		reps := t.Replicas[tp.partition]
		p := b.replicas.Get(t.Name, tp.partition)
		if p == nil {
			if forwarded {
				errs[i] = errCode(kerr.NotLeaderForPartition, "broker %d has no replica of %s-%d open", b.cfg.NodeID, tp.topic, tp.partition)
				continue
			}
			key := fmt.Sprint(reps)
			if _, ok := fwd[key]; !ok {
				cands = append(cands, reps)
			}
			fwd[key] = append(fwd[key], i)
			continue
		}
		w := electWait{idx: i, group: p.RaftGroup(), preferred: uint64(reps[0])}
		st, err := b.cluster.Host().Status(w.group)
		switch {
		case err != nil:
			errs[i] = errCode(kerr.NotLeaderForPartition, "%v", err)
		case typ == electUnclean && st.Leader != 0:
			errs[i] = errCode(kerr.ElectionNotNeeded, "partition has leader %d", st.Leader)
		case typ == electUnclean:
			errs[i] = errCode(kerr.EligibleLeadersNotAvailable, "no leader: Raft never elects an unclean leader; one is elected among the caught-up replicas once a majority is up")
		case st.QuorumSilent:
			// This node leads but heard from no quorum within an election
			// timeout: another replica may lead in a later term.
			errs[i] = errCode(kerr.PreferredLeaderNotAvailable, "broker %d leads term %d but has not heard from a quorum within an election timeout", b.cfg.NodeID, st.Term)
		case st.Leader == w.preferred:
			errs[i] = errCode(kerr.ElectionNotNeeded, "preferred replica %d already leads", w.preferred)
		case st.Leader == 0:
			errs[i] = errCode(kerr.PreferredLeaderNotAvailable, "no leader: an election is running")
		case b.meta.Fenced(reps[0]):
			// As Kafka: a fenced broker (shutting down, or out of its
			// session) is not given leadership.
			errs[i] = errCode(kerr.PreferredLeaderNotAvailable, "preferred replica %d is fenced", reps[0])
		case st.State != raft.StateLeader && !forwarded:
			// Only the leader knows whether the preferred replica is
			// caught up: ask it.
			cand := []int32{int32(st.Leader)}
			key := fmt.Sprint(cand)
			if _, ok := fwd[key]; !ok {
				cands = append(cands, cand)
			}
			fwd[key] = append(fwd[key], i)
		default:
			waits = append(waits, w)
		}
	}
	var wg sync.WaitGroup
	for _, cand := range cands {
		idxs := fwd[fmt.Sprint(cand)]
		wg.Go(func() {
			res := b.forwardElect(ctx, cand, tps, idxs, typ)
			for k, i := range idxs {
				errs[i] = res[k]
			}
		})
	}
	b.awaitTransfers(ctx, waits, errs)
	wg.Wait()
	return errs
}

// electWait is a preferred election this node drives.
type electWait struct {
	idx       int
	group     uint64
	preferred uint64
	asked     time.Time // last TransferLeader; zero before the first
	waitedFor string    // why no transfer was asked for yet
}

// awaitTransfers asks Raft to move each group's leadership to its
// preferred replica and waits until that replica leads, for all of them
// at once, until ctx ends.
func (b *Broker) awaitTransfers(ctx context.Context, ws []electWait, errs []error) {
	if len(ws) == 0 {
		return
	}
	h := b.cluster.Host()
	for {
		rest := ws[:0]
		for _, w := range ws {
			st, err := h.Status(w.group)
			if err != nil {
				errs[w.idx] = errCode(kerr.NotLeaderForPartition, "%v", err)
				continue
			}
			if st.Leader == w.preferred && !st.QuorumSilent {
				errs[w.idx] = nil
				continue
			}
			if st.State == raft.StateLeader {
				if err := cluster.Transferable(st, w.preferred); err != nil {
					if !errors.Is(err, cluster.ErrBehind) {
						errs[w.idx] = errCode(kerr.PreferredLeaderNotAvailable, "%v", err)
						continue
					}
					w.waitedFor = err.Error()
					rest = append(rest, w)
					continue
				}
			}
			if time.Since(w.asked) >= cluster.TransferRetry {
				// On a follower, Raft passes the request to the leader.
				h.TransferLeader(w.group, w.preferred)
				w.asked, w.waitedFor = time.Now(), ""
			}
			rest = append(rest, w)
		}
		if ws = rest; len(ws) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			for _, w := range ws {
				if w.waitedFor != "" {
					errs[w.idx] = errCode(kerr.PreferredLeaderNotAvailable, "%s", w.waitedFor)
				} else {
					errs[w.idx] = errCode(kerr.RequestTimedOut, "preferred replica %d did not take over in time", w.preferred)
				}
			}
			return
		case <-b.clk().After(electPoll):
		}
	}
}

// forwardElect sends the elections of tps[idxs] to the first of the
// candidate brokers that answers, and returns their results in order.
func (b *Broker) forwardElect(ctx context.Context, cands []int32, tps []topicPartition, idxs []int, typ int8) []error {
	out := make([]error, len(idxs))
	fail := func(err error) []error {
		for k := range out {
			out[k] = err
		}
		return out
	}
	req := kmsg.NewPtrElectLeadersRequest()
	req.ElectionType = typ
	if dl, ok := ctx.Deadline(); ok {
		req.TimeoutMillis = int32(max(time.Until(dl).Milliseconds(), 1))
	}
	pos := map[topicPartition]int{}
	for k, i := range idxs {
		tp := tps[i]
		pos[tp] = k
		j := slices.IndexFunc(req.Topics, func(rt kmsg.ElectLeadersRequestTopic) bool { return rt.Topic == tp.topic })
		if j < 0 {
			j = len(req.Topics)
			rt := kmsg.NewElectLeadersRequestTopic()
			rt.Topic = tp.topic
			req.Topics = append(req.Topics, rt)
		}
		req.Topics[j].Partitions = append(req.Topics[j].Partitions, tp.partition)
	}
	var last error
	for _, id := range cands {
		if id == b.cfg.NodeID {
			continue
		}
		kresp, err := b.cluster.Send(ctx, id, req)
		if err != nil {
			last = err
			continue
		}
		resp := kresp.(*kmsg.ElectLeadersResponse)
		for k := range out {
			out[k] = errCode(kerr.UnknownServerError, "broker %d left the partition out of its answer", id)
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				k, ok := pos[topicPartition{rt.Topic, rp.Partition}]
				if !ok {
					continue
				}
				out[k] = nil
				if rp.ErrorCode != 0 {
					msg := kerr.ErrorForCode(rp.ErrorCode).Error()
					if rp.ErrorMessage != nil {
						msg = *rp.ErrorMessage
					}
					ke, ok := kerr.ErrorForCode(rp.ErrorCode).(*kerr.Error)
					if !ok {
						ke = kerr.UnknownServerError
					}
					out[k] = errCode(ke, "broker %d: %s", id, msg)
				}
			}
		}
		return out
	}
	return fail(errCode(kerr.PreferredLeaderNotAvailable, "no replica broker answered (tried %s): %v", joinIDs(cands), last))
}

func joinIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}
