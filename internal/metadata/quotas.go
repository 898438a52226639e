package metadata

import (
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

// Client quotas (KIP-13, KIP-55, KIP-124, KIP-599) live in the metadata
// (the metadata log in a cluster), so every node throttles from the same
// committed state, as Kafka's QuotaRecords do.

// OpClientQuotas applies Command.Quotas: each alteration sets and removes
// keys of one entity. An entity left with no key is forgotten.
const OpClientQuotas = "client_quotas"

// Quota entity types and keys, Kafka's names.
const (
	QuotaUser     = "user"
	QuotaClientID = "client-id"
	QuotaIP       = "ip"

	QuotaProducerByteRate       = "producer_byte_rate"
	QuotaConsumerByteRate       = "consumer_byte_rate"
	QuotaRequestPercentage      = "request_percentage"
	QuotaControllerMutationRate = "controller_mutation_rate"
	// QuotaConnectionCreationRate is KIP-612's quota of an ip entity:
	// new connections per second from one client address (Kafka's INT).
	QuotaConnectionCreationRate = "connection_creation_rate"
)

// QuotaKeys are the quota keys of user and client-id entities; the byte
// rates are Kafka LONG configs (whole numbers), the others DOUBLE.
var QuotaKeys = map[string]bool{
	QuotaProducerByteRate:       true, // long
	QuotaConsumerByteRate:       true, // long
	QuotaRequestPercentage:      false,
	QuotaControllerMutationRate: false,
}

// MaxQuotaEntities bounds how many entities may have quotas.
const MaxQuotaEntities = 100000

// QuotaEntity names who a quota applies to, as Kafka's ClientQuotaEntity:
// entity type ("user", "client-id") to a name, nil for the default
// (<default> in kafka-configs). A type that is absent is not part of the
// entity: {user: alice} applies to every client id of alice, {user: alice,
// client-id: nil} to each client id of alice that has no quota of its own.
type QuotaEntity map[string]*string

// Key is a canonical string for the entity (for sorting and maps).
func (e QuotaEntity) Key() string {
	types := slices.Sorted(maps.Keys(e))
	var b strings.Builder
	for _, t := range types {
		b.WriteString(t)
		if n := e[t]; n == nil {
			b.WriteString("\x00d")
		} else {
			b.WriteString("\x00n")
			b.WriteString(*n)
		}
		b.WriteByte(0)
	}
	return b.String()
}

// String is the entity as kafka-configs prints it: user=alice, client-id=<default>.
func (e QuotaEntity) String() string {
	types := slices.Sorted(maps.Keys(e))
	parts := make([]string, len(types))
	for i, t := range types {
		n := "<default>"
		if e[t] != nil {
			n = *e[t]
		}
		parts[i] = t + "=" + n
	}
	return strings.Join(parts, ", ")
}

func (e QuotaEntity) clone() QuotaEntity {
	out := make(QuotaEntity, len(e))
	for t, n := range e {
		if n != nil {
			v := *n
			n = &v
		}
		out[t] = n
	}
	return out
}

// ClientQuota is one entity's quotas.
type ClientQuota struct {
	Entity QuotaEntity        `json:"entity"`
	Values map[string]float64 `json:"values"`
}

// QuotaAlteration sets and removes quota keys of one entity.
type QuotaAlteration struct {
	Entity QuotaEntity        `json:"entity"`
	Set    map[string]float64 `json:"set,omitempty"`
	Remove []string           `json:"remove,omitempty"`
}

// ValidateQuotaEntity checks an entity as Kafka's controller does: user
// and/or client-id, each at most once, names not empty; or an ip entity
// alone (KIP-612), a named one being an IP address. Kafka also takes a
// host name it can resolve there; Holdfast does not, as a name resolved
// when the entry is applied could mean different addresses on different
// nodes.
func ValidateQuotaEntity(e QuotaEntity) error {
	if len(e) == 0 {
		return fmt.Errorf("Invalid empty client quota entity")
	}
	for t, n := range e {
		switch t {
		case QuotaUser, QuotaClientID, QuotaIP:
		default:
			return fmt.Errorf("Unhandled client quota entity type: %s", t)
		}
		if n != nil && *n == "" {
			return fmt.Errorf("Empty %s not supported", t)
		}
	}
	if ip, ok := e[QuotaIP]; ok {
		if len(e) > 1 {
			return fmt.Errorf("Invalid empty client quota entity") // Kafka's words for a mixed entity
		}
		if ip != nil {
			if _, err := netip.ParseAddr(*ip); err != nil {
				return fmt.Errorf("%s is not a valid IP or resolvable host.", *ip)
			}
		}
	}
	return nil
}

// QuotaIPAddr is the address a named ip entity names, unmapped (an
// IPv4-mapped IPv6 address is its IPv4 address, as connections report it).
func QuotaIPAddr(name string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(name)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// ValidateQuotaValue checks one key and value for entity e: a key of the
// entity's type (connection_creation_rate for ip entities, the others for
// user and client-id ones), a whole number for the byte rates (Kafka's
// LONG) and the connection rate (Kafka's INT), and a positive value (a
// zero rate would throttle forever: Holdfast refuses it where Kafka does
// not).
func ValidateQuotaValue(e QuotaEntity, key string, v float64) error {
	long, ok := QuotaKeys[key]
	if _, ip := e[QuotaIP]; ip {
		long, ok = true, key == QuotaConnectionCreationRate
	}
	if !ok {
		return fmt.Errorf("Invalid configuration key %s", key)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("Configuration %s must be a finite number", key)
	}
	if key == QuotaConnectionCreationRate && v > math.MaxInt32 {
		return fmt.Errorf("Configuration %s must be an Integer value", key)
	}
	if long {
		const epsilon = 1e-6
		if math.Abs(math.Trunc(v+epsilon)-v) > epsilon {
			return fmt.Errorf("Configuration %s must be a Long value", key)
		}
	}
	if v <= 0 {
		return fmt.Errorf("Configuration %s must be positive", key)
	}
	return nil
}

// ClientQuotas returns every entity's quotas, sorted by entity.
func (s *Store) ClientQuotas() []ClientQuota {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]ClientQuota, len(s.img.st.Quotas))
	for i, q := range s.img.st.Quotas {
		out[i] = ClientQuota{Entity: q.Entity.clone(), Values: maps.Clone(q.Values)}
	}
	return out
}

// applyQuotas applies OpClientQuotas; handled is false for other commands.
// The proposer validated the alterations; they are checked again here so
// that a bad entry fails the same way on every node.
func applyQuotas(next *state, c Command) (handled bool, err error) {
	if c.Op != OpClientQuotas {
		return false, nil
	}
	byKey := make(map[string]int, len(next.Quotas))
	quotas := make([]ClientQuota, len(next.Quotas))
	for i, q := range next.Quotas {
		quotas[i] = ClientQuota{Entity: q.Entity, Values: q.Values} // values copied on change
		byKey[q.Entity.Key()] = i
	}
	for _, a := range c.Quotas {
		if err := ValidateQuotaEntity(a.Entity); err != nil {
			return true, fmt.Errorf("metadata: %w", err)
		}
		for k, v := range a.Set {
			if err := ValidateQuotaValue(a.Entity, k, v); err != nil {
				return true, fmt.Errorf("metadata: %w", err)
			}
		}
		k := a.Entity.Key()
		i, ok := byKey[k]
		if !ok {
			quotas = append(quotas, ClientQuota{Entity: a.Entity.clone()})
			i = len(quotas) - 1
			byKey[k] = i
		}
		vals := maps.Clone(quotas[i].Values)
		if vals == nil {
			vals = map[string]float64{}
		}
		for _, r := range a.Remove {
			delete(vals, r)
		}
		maps.Copy(vals, a.Set)
		quotas[i].Values = vals
	}
	quotas = slices.DeleteFunc(quotas, func(q ClientQuota) bool { return len(q.Values) == 0 })
	if len(quotas) > MaxQuotaEntities {
		return true, fmt.Errorf("metadata: more than %d client quota entities", MaxQuotaEntities)
	}
	sort.Slice(quotas, func(i, j int) bool { return quotas[i].Entity.Key() < quotas[j].Entity.Key() })
	next.Quotas = quotas
	return true, nil
}
