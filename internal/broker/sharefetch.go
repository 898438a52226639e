package broker

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/partition"
	"holdfast/internal/share"
	"holdfast/internal/wire"
)

// ShareFetch and ShareAcknowledge (KIP-932) on a partition's leader: the
// share session (share/session.go) names the partitions, acknowledgements
// are applied and made durable first (share/manager.go), then records are
// acquired for the member under acquisition locks and returned with the
// batches that hold them. Versions 1-2 (Kafka 4.1-4.2: v2 adds
// KIP-1206's record-limit acquire mode and KIP-1222's lock renewal);
// Kafka 4.0's early-access v0 is not served.

// maxShareFetchWait bounds a ShareFetch's long poll.
const maxShareFetchWait = 30 * time.Second

// sharePartError is the Kafka code of a share partition's error.
func sharePartError(err error) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, share.ErrInvalidRecordState):
		return kerr.InvalidRecordState.Code
	case errors.Is(err, share.ErrInvalidRequest):
		return kerr.InvalidRequest.Code
	case errors.Is(err, share.ErrNotLeader), errors.Is(err, share.ErrFencedLeaderEpoch), errors.Is(err, share.ErrFencedStateEpoch):
		return kerr.NotLeaderForPartition.Code
	case errors.Is(err, partition.ErrStorage):
		return kerr.KafkaStorageError.Code
	}
	if code, _ := kafkaError(err); code != 0 && code != kerr.UnknownServerError.Code {
		return code
	}
	// The coordinator could not be reached to store the state: the
	// partition's client retries it.
	return kerr.CoordinatorNotAvailable.Code
}

// sessionError is the Kafka code of a share-session error.
func sessionError(err error) int16 {
	switch {
	case errors.Is(err, share.ErrSessionNotFound):
		return kerr.ShareSessionNotFound.Code
	case errors.Is(err, share.ErrInvalidSessionEpoch):
		return kerr.InvalidShareSessionEpoch.Code
	case errors.Is(err, share.ErrSessionLimit):
		return kerr.ShareSessionLimitReached.Code
	}
	return kerr.UnknownServerError.Code
}

// sharePart is one partition of a ShareFetch/ShareAcknowledge with its
// outcome.
type sharePart struct {
	tp       share.TP
	topic    string // "" if the topic id is unknown
	p        *partition.Partition
	code     int16 // fetch error
	ackCode  int16
	acked    bool // the request carried acknowledgements for it
	acks     []share.AckBatch
	fetched  share.Fetched
	canFetch bool
}

// resolveSharePart finds tp's partition on this node, as its leader.
func (b *Broker) resolveSharePart(r *wire.Request, sp *sharePart) {
	t, ok := b.meta.TopicByID(sp.tp.TopicID)
	if !ok {
		sp.code = kerr.UnknownTopicID.Code
		return
	}
	sp.topic = t.Name
	if !b.authorize(r, auth.OpRead, auth.ResourceTopic, t.Name) {
		sp.code = kerr.TopicAuthorizationFailed.Code
		return
	}
	p, code := b.replicas.Lookup(t.Name, sp.tp.Partition)
	if code == 0 && !p.IsLeader() {
		code = kerr.NotLeaderForPartition.Code
	}
	if code != 0 {
		sp.code = code
		return
	}
	sp.p = p
}

// shareRequestMember is the check ShareFetch and ShareAcknowledge (named
// api) start with: share groups on, a group and a member named, READ on
// the group. code is the error to answer, 0 if none.
func (b *Broker) shareRequestMember(r *wire.Request, api string, groupID, memberID *string) (group, member string, code int16, msg string) {
	switch {
	case b.featureLevel("share.version") < 1:
		return "", "", kerr.UnsupportedVersion.Code, "Share groups are not enabled: share.version is 0."
	case groupID == nil || *groupID == "" || memberID == nil || *memberID == "":
		return "", "", kerr.InvalidRequest.Code, api + " needs a group id and a member id"
	case !b.authorize(r, auth.OpRead, auth.ResourceGroup, *groupID):
		return "", "", kerr.GroupAuthorizationFailed.Code, ""
	}
	return *groupID, *memberID, 0, ""
}

func (b *Broker) handleShareFetch(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ShareFetchRequest)
	resp := req.ResponseKind().(*kmsg.ShareFetchResponse)
	fail := func(code int16, msg string) wire.Reply {
		resp.ErrorCode = code
		if msg != "" {
			resp.ErrorMessage = &msg
		}
		return wire.Respond(resp)
	}
	group, member, code, msg := b.shareRequestMember(r, "ShareFetch", req.GroupID, req.MemberID)
	if code != 0 {
		return fail(code, msg)
	}
	var add, forget []share.TP
	byTP := map[share.TP]*sharePart{}
	var order []*sharePart
	hasAcks, renew := false, false
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			tp := share.TP{TopicID: rt.TopicID, Partition: rp.Partition}
			add = append(add, tp)
			sp := byTP[tp]
			if sp == nil {
				sp = &sharePart{tp: tp}
				byTP[tp] = sp
				order = append(order, sp)
			}
			for _, ab := range rp.AcknowledgementBatches {
				sp.acked, hasAcks = true, true
				sp.acks = append(sp.acks, share.AckBatch{First: ab.FirstOffset, Last: ab.LastOffset, Types: ab.AcknowledgeTypes})
				for _, t := range ab.AcknowledgeTypes {
					renew = renew || t == share.AckRenew
				}
			}
		}
	}
	for _, ft := range req.ForgottenTopicsData {
		for _, p := range ft.Partitions {
			forget = append(forget, share.TP{TopicID: ft.TopicID, Partition: p})
		}
	}
	switch {
	case req.ShareSessionEpoch == 0 && hasAcks:
		return fail(kerr.InvalidRequest.Code, "acknowledgements cannot open a share session (epoch 0)")
	case renew && (!req.IsRenewAck || req.Version < 2):
		return fail(kerr.InvalidRequest.Code, "renew acknowledgements need ShareFetch v2 with IsRenewAck")
	case req.IsRenewAck && (req.MaxWaitMillis != 0 || req.MinBytes != 0 || req.MaxRecords != 0):
		return fail(kerr.InvalidRequest.Code, "a ShareFetch with renew acknowledgements must not fetch")
	}
	parts, err := b.share.UseSession(share.SessionKey{Group: group, Member: member}, req.ShareSessionEpoch, add, forget)
	if err != nil {
		return fail(sessionError(err), err.Error())
	}
	closing := req.ShareSessionEpoch == -1
	for _, tp := range parts {
		sp := byTP[tp]
		if sp == nil {
			sp = &sharePart{tp: tp}
			byTP[tp] = sp
			order = append(order, sp)
		}
		sp.canFetch = !closing && !req.IsRenewAck
	}
	for _, sp := range order {
		b.resolveSharePart(r, sp)
	}
	listener := b.listenerName(r)
	return func(ctx context.Context) kmsg.Response {
		b.shareAcknowledgeParts(ctx, group, member, order)
		if closing {
			b.releaseParts(ctx, group, member, order)
		}
		resp.AcquisitionLockTimeoutMillis = int32(b.shareSettings(group).LockDuration.Milliseconds())
		if !closing && !req.IsRenewAck {
			b.shareAcquire(ctx, req, group, member, order)
		}
		if ctx.Err() != nil {
			return nil
		}
		h := b.newLeaderHints(listener)
		byTopic := map[[16]byte]int{}
		for _, sp := range order {
			if sp.code == 0 && !sp.acked && len(sp.fetched.Acquired) == 0 && req.ShareSessionEpoch != 0 {
				continue // incremental: nothing to say about it
			}
			ti, ok := byTopic[sp.tp.TopicID]
			if !ok {
				ti = len(resp.Topics)
				byTopic[sp.tp.TopicID] = ti
				rt := kmsg.NewShareFetchResponseTopic()
				rt.TopicID = sp.tp.TopicID
				resp.Topics = append(resp.Topics, rt)
			}
			rp := kmsg.NewShareFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.AcknowledgeErrorCode = sp.tp.Partition, sp.code, sp.ackCode
			if leader, epoch, ok := h.hint(sp.topic, sp.tp.Partition, sp.code); ok {
				rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = leader, epoch
			}
			rp.Records = sp.fetched.Records
			for _, a := range sp.fetched.Acquired {
				rp.AcquiredRecords = append(rp.AcquiredRecords, kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{FirstOffset: a.First, LastOffset: a.Last, DeliveryCount: a.Count})
			}
			resp.Topics[ti].Partitions = append(resp.Topics[ti].Partitions, rp)
		}
		for _, hb := range h.brokers {
			resp.NodeEndpoints = append(resp.NodeEndpoints, kmsg.ShareFetchResponseNodeEndpoint{NodeID: hb.id, Host: hb.host, Port: hb.port, Rack: hb.rack})
		}
		return resp
	}
}

// shareAcknowledgeParts applies each part's acknowledgements.
func (b *Broker) shareAcknowledgeParts(ctx context.Context, group, member string, parts []*sharePart) {
	for _, sp := range parts {
		if !sp.acked {
			continue
		}
		if sp.code != 0 {
			sp.ackCode = sp.code
			continue
		}
		err := b.share.Acknowledge(ctx, share.Key{Group: group, TopicID: sp.tp.TopicID, Partition: sp.tp.Partition}, sp.p, member, sp.acks)
		sp.ackCode = sharePartError(err)
	}
}

// releaseParts releases what member holds on parts (its session closed).
func (b *Broker) releaseParts(ctx context.Context, group, member string, parts []*sharePart) {
	for _, sp := range parts {
		if sp.p == nil {
			continue
		}
		if err := b.share.Release(ctx, share.Key{Group: group, TopicID: sp.tp.TopicID, Partition: sp.tp.Partition}, member); err != nil {
			b.log.Debug("releasing a closed share session's records", "group", group, "member", member, "err", err)
		}
	}
}

// shareAcquire acquires records for member on the fetchable parts, at
// most req.MaxRecords in all, waiting up to MaxWaitMillis for some.
func (b *Broker) shareAcquire(ctx context.Context, req *kmsg.ShareFetchRequest, group, member string, parts []*sharePart) {
	wait := min(time.Duration(req.MaxWaitMillis)*time.Millisecond, maxShareFetchWait)
	deadline := time.Now().Add(wait)
	maxRecords := int(req.MaxRecords)
	if maxRecords <= 0 {
		maxRecords = 500
	}
	maxBytes := int(req.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = 1 << 30
	}
	strict := req.Version >= 2 && req.ShareAcquireMode == 1
	for {
		var wake []<-chan struct{}
		got, left, bytesLeft := 0, maxRecords, maxBytes
		for _, sp := range parts {
			if !sp.canFetch || sp.code != 0 || sp.p == nil {
				continue
			}
			k := share.Key{Group: group, TopicID: sp.tp.TopicID, Partition: sp.tp.Partition}
			wake = append(wake, sp.p.Notify())
			if left <= 0 || bytesLeft <= 0 {
				continue
			}
			f, err := b.share.Acquire(ctx, k, sp.p, member, left, strict, bytesLeft)
			if err != nil {
				sp.code = sharePartError(err)
				continue
			}
			if ch := b.share.Available(k); ch != nil {
				wake = append(wake, ch)
			}
			sp.fetched = f
			for _, a := range f.Acquired {
				n := int(a.Last - a.First + 1)
				got += n
				left -= n
			}
			bytesLeft -= len(f.Records)
		}
		if got > 0 || req.MinBytes <= 0 || len(wake) == 0 || !time.Now().Before(deadline) {
			return
		}
		if !waitAny(ctx, wake, time.Until(deadline)) {
			return
		}
	}
}

// waitAny waits until one of chs is closed (true), d passes or ctx ends.
func waitAny(ctx context.Context, chs []<-chan struct{}, d time.Duration) bool {
	wake := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	for _, ch := range chs {
		go func() {
			select {
			case <-ch:
				select {
				case wake <- struct{}{}:
				case <-stop:
				}
			case <-stop:
			}
		}()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (b *Broker) handleShareAcknowledge(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ShareAcknowledgeRequest)
	resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
	fail := func(code int16, msg string) wire.Reply {
		resp.ErrorCode = code
		if msg != "" {
			resp.ErrorMessage = &msg
		}
		return wire.Respond(resp)
	}
	group, member, code, msg := b.shareRequestMember(r, "ShareAcknowledge", req.GroupID, req.MemberID)
	if code != 0 {
		return fail(code, msg)
	}
	var order []*sharePart
	renew := false
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			sp := &sharePart{tp: share.TP{TopicID: rt.TopicID, Partition: rp.Partition}, acked: true}
			for _, ab := range rp.AcknowledgementBatches {
				sp.acks = append(sp.acks, share.AckBatch{First: ab.FirstOffset, Last: ab.LastOffset, Types: ab.AcknowledgeTypes})
				for _, t := range ab.AcknowledgeTypes {
					renew = renew || t == share.AckRenew
				}
			}
			order = append(order, sp)
		}
	}
	if renew && (!req.IsRenewAck || req.Version < 2) {
		return fail(kerr.InvalidRequest.Code, "renew acknowledgements need ShareAcknowledge v2 with IsRenewAck")
	}
	sessionParts, err := b.share.CheckSession(share.SessionKey{Group: group, Member: member}, req.ShareSessionEpoch)
	if err != nil {
		return fail(sessionError(err), err.Error())
	}
	closing := req.ShareSessionEpoch == -1
	var release []*sharePart
	for _, sp := range order {
		b.resolveSharePart(r, sp)
	}
	if closing {
		for _, tp := range sessionParts {
			sp := &sharePart{tp: tp}
			b.resolveSharePart(r, sp)
			release = append(release, sp)
		}
	}
	listener := b.listenerName(r)
	return func(ctx context.Context) kmsg.Response {
		b.shareAcknowledgeParts(ctx, group, member, order)
		if closing {
			b.releaseParts(ctx, group, member, release)
		}
		if ctx.Err() != nil {
			return nil
		}
		if req.Version >= 2 {
			resp.AcquisitionLockTimeoutMillis = int32(b.shareSettings(group).LockDuration.Milliseconds())
		}
		h := b.newLeaderHints(listener)
		byTopic := map[[16]byte]int{}
		for _, sp := range order {
			ti, ok := byTopic[sp.tp.TopicID]
			if !ok {
				ti = len(resp.Topics)
				byTopic[sp.tp.TopicID] = ti
				rt := kmsg.NewShareAcknowledgeResponseTopic()
				rt.TopicID = sp.tp.TopicID
				resp.Topics = append(resp.Topics, rt)
			}
			rp := kmsg.NewShareAcknowledgeResponseTopicPartition()
			rp.Partition, rp.ErrorCode = sp.tp.Partition, sp.ackCode
			if leader, epoch, ok := h.hint(sp.topic, sp.tp.Partition, sp.ackCode); ok {
				rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = leader, epoch
			}
			resp.Topics[ti].Partitions = append(resp.Topics[ti].Partitions, rp)
		}
		for _, hb := range h.brokers {
			resp.NodeEndpoints = append(resp.NodeEndpoints, kmsg.ShareAcknowledgeResponseNodeEndpoint{NodeID: hb.id, Host: hb.host, Port: hb.port, Rack: hb.rack})
		}
		return resp
	}
}
