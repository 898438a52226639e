package broker

import (
	"context"
	"reflect"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/quota"
	"holdfast/internal/wire"
)

// Client quotas, enforced the Kafka way: each request's cost is recorded
// against the rate of its (user, client-id), the response carries
// throttle_time_ms, and the connection is muted for that long (KIP-219:
// the response goes first, the next request of the connection waits).
//
//   - producer_byte_rate: the produce request's size, recorded when it is
//     handled; the response (or, for acks=0, no response) is throttled.
//   - consumer_byte_rate: the record bytes of the fetch response. A fetch
//     asks for at most one quota window's worth; a throttled fetch is
//     answered empty (its bytes are not counted), as Kafka does.
//   - request_percentage: the time a request spends in its handler's
//     in-order part (Handle), as percent of one thread. Waits that Kafka
//     keeps in purgatory (replication, long polls, rebalances) are not
//     counted here either.
//   - controller_mutation_rate: partitions created or deleted by
//     CreateTopics, CreatePartitions and DeleteTopics (mutationQuota).
//
// The quotas come from the metadata (AlterClientQuotas); the rates are
// this node's: a client is measured by each broker it talks to, as in
// Kafka. Node-to-node requests are exempt.

// QuotaStats lists the rates this node tracks, for metrics.
func (b *Broker) QuotaStats() []quota.Stat { return b.quotas.Stats() }

// quotasApplied loads the committed client quotas.
func (b *Broker) quotasApplied() { b.quotas.SetQuotas(b.meta.ClientQuotas()) }

// quotaUser is the user a quota entity names: the principal's name
// (ANONYMOUS for an unauthenticated connection).
func quotaUser(r *wire.Request) string { return r.Principal.Name }

// quotaExempt: requests no quota applies to.
func (b *Broker) quotaExempt(r *wire.Request) bool {
	return r.Key == kmsg.ApiVersions.Int16() || b.forwardedBy(r)
}

// withQuotas serves r with fn and throttles it by the quotas that apply.
func (b *Broker) withQuotas(ctx context.Context, fn handlerFunc, r *wire.Request) wire.Reply {
	if b.quotaExempt(r) {
		return fn(b, ctx, r)
	}
	q := b.quotas
	user, client := quotaUser(r), r.ClientID
	fetch, _ := r.Body.(*kmsg.FetchRequest)
	if fetch != nil {
		// Kafka: a fetch asks for no more than one quota window's bytes.
		if limit, ok := q.MaxValueInWindow(quota.Fetch, user, client); ok && float64(fetch.MaxBytes) > limit {
			fetch.MaxBytes = int32(max(limit, 1))
			fetch.MinBytes = min(fetch.MinBytes, fetch.MaxBytes)
		}
	}
	timed := q.Active(quota.Request)
	var start time.Time
	if timed {
		start = time.Now()
	}
	reply := fn(b, ctx, r)
	var throttle time.Duration
	if timed {
		// Percent of one thread, over the window: nanoseconds * 100 / 1e9.
		throttle = q.Record(quota.Request, user, client, float64(time.Since(start).Nanoseconds())*100/1e9)
	}
	if r.Key == kmsg.Produce.Int16() {
		throttle = max(throttle, q.Record(quota.Produce, user, client, float64(r.Size)))
	}
	r.Conn.Throttle(throttle)
	if throttle == 0 && (fetch == nil || !q.Active(quota.Fetch)) {
		return reply
	}
	return func(ctx context.Context) kmsg.Response {
		resp := reply(ctx)
		if resp == nil {
			return nil
		}
		t := throttle
		if fetch != nil {
			bytes := float64(fetchedBytes(resp))
			ft := q.Record(quota.Fetch, user, client, bytes)
			if ft > 0 || t > 0 {
				// Throttled: an empty answer, and its bytes do not count.
				q.Unrecord(quota.Fetch, user, client, bytes)
				r.Conn.Throttle(ft)
				t = max(t, ft)
				releaseFiles(resp)
				resp = fetch.ResponseKind()
			}
		}
		setThrottle(resp, t)
		return resp
	}
}

// mutationQuota is the controller mutation quota of a CreateTopics,
// CreatePartitions or DeleteTopics request; strict from the version that
// knows THROTTLING_QUOTA_EXCEEDED. nil when no quota can apply.
func (b *Broker) mutationQuota(r *wire.Request, strict bool) *quota.Mutation {
	if !b.quotas.Active(quota.ControllerMutation) || b.quotaExempt(r) {
		return nil
	}
	return b.quotas.Mutation(quotaUser(r), r.ClientID, strict)
}

// throttleMutation puts a mutation quota's throttle in a response's
// throttle_time_ms and mutes the connection for it.
func throttleMutation(r *wire.Request, q *quota.Mutation, throttleMillis *int32) {
	if d := q.Throttle(); d > 0 {
		r.Conn.Throttle(d)
		*throttleMillis = max(*throttleMillis, int32(d.Milliseconds()))
	}
}

// fetchedBytes is the record bytes of a fetch response; those sent by
// sendfile are counted by their file ranges.
func fetchedBytes(resp kmsg.Response) int64 {
	var n int64
	if sp, ok := resp.(*wire.Spliced); ok {
		for i, r := range sp.Ranges {
			n += int64(r.Len) - int64(len(sp.Placeholders[i]))
		}
		resp = sp.Response
	}
	fr, ok := resp.(*kmsg.FetchResponse)
	if !ok {
		return n
	}
	for _, t := range fr.Topics {
		for _, p := range t.Partitions {
			n += int64(len(p.RecordBatches))
		}
	}
	return n
}

// setThrottle sets throttle_time_ms of any response that has it, keeping a
// longer one the handler set.
func setThrottle(resp kmsg.Response, d time.Duration) {
	if d <= 0 {
		return
	}
	if sp, ok := resp.(*wire.Spliced); ok {
		resp = sp.Response
	}
	v := reflect.ValueOf(resp)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return
	}
	f := v.Elem().FieldByName("ThrottleMillis")
	if !f.IsValid() || f.Kind() != reflect.Int32 || !f.CanSet() {
		return
	}
	if ms := d.Milliseconds(); ms > f.Int() {
		f.SetInt(ms)
	}
}
