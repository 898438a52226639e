package broker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// AlterClientQuotas v0-1 (KIP-546): set and remove quota keys of user and
// client-id entities, and connection_creation_rate of ip entities
// (KIP-612); what kafka-configs.sh --alter --entity-type users/clients/ips
// and kadm send. The valid entries commit together through
// the metadata log, so every node throttles from them. Needs ALTER_CONFIGS
// on the cluster.
func (b *Broker) handleAlterClientQuotas(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AlterClientQuotasRequest)
	resp := req.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	for _, e := range req.Entries {
		re := kmsg.NewAlterClientQuotasResponseEntry()
		for _, c := range e.Entity {
			rc := kmsg.NewAlterClientQuotasResponseEntryEntity()
			rc.Type, rc.Name = c.Type, c.Name
			re.Entity = append(re.Entity, rc)
		}
		resp.Entries = append(resp.Entries, re)
	}
	fail := func(i int, code *kerr.Error, msg string) {
		if resp.Entries[i].ErrorCode == 0 {
			resp.Entries[i].ErrorCode, resp.Entries[i].ErrorMessage = code.Code, kmsg.StringPtr(msg)
		}
	}
	if !b.forwardedBy(r) && !b.authorizeCluster(r, auth.OpAlterConfigs) {
		for i := range resp.Entries {
			fail(i, kerr.ClusterAuthorizationFailed, kerr.ClusterAuthorizationFailed.Description)
		}
		return wire.Respond(resp)
	}

	var alts []metadata.QuotaAlteration
	var ok []int // entries in alts
	seen := map[string]bool{}
	for i, e := range req.Entries {
		a, err := quotaAlteration(e)
		if err != nil {
			fail(i, kerr.InvalidRequest, err.Error())
			continue
		}
		if k := a.Entity.Key(); seen[k] {
			fail(i, kerr.InvalidRequest, "Ignoring duplicate entity "+a.Entity.String())
			continue
		} else {
			seen[k] = true
		}
		alts, ok = append(alts, a), append(ok, i)
	}
	if req.ValidateOnly || len(alts) == 0 {
		return wire.Respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		if fresp, forwarded, err := b.cluster.ForwardToController(ctx, req); forwarded {
			if err != nil {
				code, msg := kafkaError(err)
				for _, i := range ok {
					resp.Entries[i].ErrorCode, resp.Entries[i].ErrorMessage = code, msg
				}
				return resp
			}
			return fresp
		}
		code, msg := kafkaError(b.cluster.Propose(ctx, metadata.Command{Op: metadata.OpClientQuotas, Quotas: alts}))
		for _, i := range ok {
			resp.Entries[i].ErrorCode, resp.Entries[i].ErrorMessage = code, msg
		}
		if code == 0 {
			for _, a := range alts {
				b.log.Info("client quotas altered", "entity", a.Entity.String(), "set", a.Set, "removed", a.Remove, "by", r.Principal.String())
			}
		}
		return resp
	}
}

// quotaAlteration checks one entry the way Kafka's controller does and
// returns the change it asks for.
func quotaAlteration(e kmsg.AlterClientQuotasRequestEntry) (metadata.QuotaAlteration, error) {
	a := metadata.QuotaAlteration{Entity: metadata.QuotaEntity{}}
	for _, c := range e.Entity {
		if _, dup := a.Entity[c.Type]; dup {
			return a, fmt.Errorf("Invalid empty client quota entity, duplicate entity entry %s", c.Type)
		}
		a.Entity[c.Type] = c.Name
	}
	if err := metadata.ValidateQuotaEntity(a.Entity); err != nil {
		return a, err
	}
	keys := map[string]bool{}
	for _, op := range e.Ops {
		if keys[op.Key] {
			return a, fmt.Errorf("Duplicate quota key %s not updating quota for this entity %s", op.Key, a.Entity.String())
		}
		keys[op.Key] = true
		if op.Remove {
			a.Remove = append(a.Remove, op.Key)
			continue
		}
		if err := metadata.ValidateQuotaValue(a.Entity, op.Key, op.Value); err != nil {
			return a, err
		}
		if a.Set == nil {
			a.Set = map[string]float64{}
		}
		a.Set[op.Key] = op.Value
	}
	return a, nil
}
