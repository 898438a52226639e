package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// DescribeClientQuotas v0-1 (KIP-546): the quota entities a filter
// matches, with their keys; what kafka-configs.sh --describe
// --entity-type users/clients/ips and kadm send. Each filter component names an
// entity type and matches a name (exact), the default, or any entity that
// has the type; strict drops entities with types the filter does not name.
// Answered from this node's copy of the metadata. Needs DESCRIBE_CONFIGS on
// the cluster.
func (b *Broker) handleDescribeClientQuotas(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeClientQuotasRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
	if !b.authorizeCluster(r, auth.OpDescribeConfigs) {
		resp.ErrorCode, resp.ErrorMessage = kerr.ClusterAuthorizationFailed.Code, kmsg.StringPtr(kerr.ClusterAuthorizationFailed.Description)
		return wire.Respond(resp)
	}
	f, code, err := quotaFilter(req)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = code.Code, kmsg.StringPtr(err.Error())
		return wire.Respond(resp)
	}
	for _, q := range b.meta.ClientQuotas() { // sorted by entity
		if !f.matches(q.Entity) {
			continue
		}
		e := kmsg.NewDescribeClientQuotasResponseEntry()
		for _, typ := range []string{metadata.QuotaUser, metadata.QuotaClientID, metadata.QuotaIP} {
			name, ok := q.Entity[typ]
			if !ok {
				continue
			}
			c := kmsg.NewDescribeClientQuotasResponseEntryEntity()
			c.Type, c.Name = typ, name
			e.Entity = append(e.Entity, c)
		}
		for _, k := range slices.Sorted(maps.Keys(q.Values)) {
			v := kmsg.NewDescribeClientQuotasResponseEntryValue()
			v.Key, v.Value = k, q.Values[k]
			e.Values = append(e.Values, v)
		}
		resp.Entries = append(resp.Entries, e)
	}
	return wire.Respond(resp)
}

// clientQuotaFilter is a parsed DescribeClientQuotas filter: types whose
// name must equal (nil: the default), types that must be present.
type clientQuotaFilter struct {
	exact  map[string]*string
	typed  map[string]bool
	strict bool
}

// quotaFilter parses the components with Kafka's checks and errors.
func quotaFilter(req *kmsg.DescribeClientQuotasRequest) (clientQuotaFilter, *kerr.Error, error) {
	f := clientQuotaFilter{exact: map[string]*string{}, typed: map[string]bool{}, strict: req.Strict}
	for _, c := range req.Components {
		t := c.EntityType
		if t == "" {
			return f, kerr.InvalidRequest, fmt.Errorf("Invalid empty entity type.")
		}
		if _, dup := f.exact[t]; dup || f.typed[t] {
			return f, kerr.InvalidRequest, fmt.Errorf("Entity type %s cannot appear more than once in the filter.", t)
		}
		if t != metadata.QuotaUser && t != metadata.QuotaClientID && t != metadata.QuotaIP {
			return f, kerr.UnsupportedVersion, fmt.Errorf("Unsupported entity type %s", t)
		}
		switch c.MatchType {
		case kmsg.QuotasMatchTypeExact:
			if c.Match == nil {
				return f, kerr.InvalidRequest, fmt.Errorf("Request specified MATCH_TYPE_EXACT, but set match string to null.")
			}
			f.exact[t] = c.Match
		case kmsg.QuotasMatchTypeDefault:
			if c.Match != nil {
				return f, kerr.InvalidRequest, fmt.Errorf("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
			}
			f.exact[t] = nil
		case kmsg.QuotasMatchTypeAny:
			if c.Match != nil {
				return f, kerr.InvalidRequest, fmt.Errorf("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
			}
			f.typed[t] = true
		default:
			return f, kerr.UnsupportedVersion, fmt.Errorf("Unknown match type %d", c.MatchType)
		}
	}
	_, ipExact := f.exact[metadata.QuotaIP]
	if ipExact || f.typed[metadata.QuotaIP] {
		if len(f.exact)+len(f.typed) > 1 {
			return f, kerr.InvalidRequest, fmt.Errorf("Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.")
		}
	}
	return f, nil, nil
}

func (f clientQuotaFilter) matches(e metadata.QuotaEntity) bool {
	if f.strict && len(e) != len(f.exact)+len(f.typed) {
		return false
	}
	for t, want := range f.exact {
		got, ok := e[t]
		if !ok || (got == nil) != (want == nil) || got != nil && *got != *want {
			return false
		}
	}
	for t := range f.typed {
		if _, ok := e[t]; !ok {
			return false
		}
	}
	return true
}
