// Package quota measures clients against their quotas the way Kafka's
// broker does (KIP-13 byte rates, KIP-55 user and client-id entities,
// KIP-124 request percentage, KIP-599 controller mutations) and says how
// long to throttle them. It knows nothing about the wire: the broker
// records what a request cost, answers with the throttle time, and mutes
// the connection for that long (KIP-219).
//
// The quotas themselves live in the cluster metadata (metadata.ClientQuota);
// SetQuotas hands this package every node's committed copy.
//
// Rates are Kafka's: a sampled rate over quota.window.num windows of
// quota.window.size.seconds each, padded to at least num-1 full windows, and
// a request that takes a (user, client-id) over its quota is throttled for
// (rate - quota) / quota * window, the time it takes for the rate to fall
// back to the quota. Controller mutations use KIP-599's token bucket.
package quota

import (
	"math"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"holdfast/internal/metadata"
)

// Type is what a quota limits; its String is Kafka's sensor type.
type Type int

const (
	Produce            Type = iota // producer_byte_rate: bytes per second of produce requests
	Fetch                          // consumer_byte_rate: bytes per second of fetch responses
	Request                        // request_percentage: percent of one thread's time in request handlers
	ControllerMutation             // controller_mutation_rate: partitions created or deleted per second
	numTypes
)

var typeNames = [numTypes]string{"Produce", "Fetch", "Request", "ControllerMutation"}
var typeKeys = [numTypes]string{metadata.QuotaProducerByteRate, metadata.QuotaConsumerByteRate,
	metadata.QuotaRequestPercentage, metadata.QuotaControllerMutationRate}

func (t Type) String() string { return typeNames[t] }

// Key is the quota config key of the type.
func (t Type) Key() string { return typeKeys[t] }

// Types lists every quota type.
func Types() []Type { return []Type{Produce, Fetch, Request, ControllerMutation} }

// Config is the quota windows, Kafka's broker configs.
type Config struct {
	WindowNum  int           // quota.window.num (11)
	WindowSize time.Duration // quota.window.size.seconds (1 s)
	// The controller mutation token bucket's burst is
	// controller.quota.window.num * controller.quota.window.size.seconds
	// seconds of the quota.
	ControllerWindowNum  int           // controller.quota.window.num (11)
	ControllerWindowSize time.Duration // controller.quota.window.size.seconds (1 s)
}

// DefaultConfig is Kafka's defaults.
func DefaultConfig() Config {
	return Config{WindowNum: 11, WindowSize: time.Second, ControllerWindowNum: 11, ControllerWindowSize: time.Second}
}

// Limits on what the manager keeps.
const (
	// MaxSensors bounds the (type, user, client-id) rates tracked. Past
	// it, new ones share one overflow rate per type: a flood of client ids
	// is throttled together rather than let through.
	MaxSensors = 100000
	// sensorIdle is how long an unused rate is kept (Kafka's
	// InactiveSensorExpirationTimeSeconds, one hour).
	sensorIdle = time.Hour
)

// overflowName names the shared rate of clients past MaxSensors.
const overflowName = "<overflow>"

// part is one side of a quota entity.
type part struct {
	kind uint8 // absent, def, named
	name string
}

const (
	absent uint8 = iota
	def
	named
)

type entityKey struct{ user, client part }

// table is the committed quotas, immutable once built.
type table struct {
	any      [numTypes]bool
	byEntity map[entityKey][numTypes]float64 // 0: no quota of that type
	// KIP-612's connection_creation_rate of ip entities: by address, and
	// the default ip entity's (0: none).
	ipRate    map[netip.Addr]float64
	ipDefault float64
}

// sensorKey is who shares a rate: Kafka's metric tags (user, client-id),
// "" for a side the matching quota does not name.
type sensorKey struct {
	typ          Type
	user, client string
}

type sensor struct {
	rate   rate
	bucket bucket
	bound  float64
	used   time.Duration // last use, since the manager's base
	// Throttle figures, for metrics.
	throttled    int64
	throttleTime time.Duration
}

// Manager tracks every client's rates against the quotas.
type Manager struct {
	cfg  Config
	base time.Time
	now  func() time.Duration // since base; replaced in tests

	quotas atomic.Pointer[table]

	mu        sync.Mutex
	sensors   map[sensorKey]*sensor
	lastSweep time.Duration
	// ipSensors are the connection rates of client addresses (ipconn.go).
	ipSensors   map[netip.Addr]*sensor
	ipLastSweep time.Duration
}

// New returns a manager with no quotas.
func New(cfg Config) *Manager {
	d := DefaultConfig()
	if cfg.WindowNum < 2 {
		cfg.WindowNum = d.WindowNum
	}
	if cfg.WindowSize <= 0 {
		cfg.WindowSize = d.WindowSize
	}
	if cfg.ControllerWindowNum < 1 {
		cfg.ControllerWindowNum = d.ControllerWindowNum
	}
	if cfg.ControllerWindowSize <= 0 {
		cfg.ControllerWindowSize = d.ControllerWindowSize
	}
	m := &Manager{cfg: cfg, base: time.Now(), sensors: map[sensorKey]*sensor{}, ipSensors: map[netip.Addr]*sensor{}}
	m.now = func() time.Duration { return time.Since(m.base) }
	m.quotas.Store(&table{})
	return m
}

// Config returns the windows the manager measures with.
func (m *Manager) Config() Config { return m.cfg }

// SetQuotas replaces the quotas (every committed entity).
func (m *Manager) SetQuotas(qs []metadata.ClientQuota) {
	t := &table{byEntity: make(map[entityKey][numTypes]float64, len(qs)), ipRate: map[netip.Addr]float64{}}
	for _, q := range qs {
		if name, ok := q.Entity[metadata.QuotaIP]; ok {
			v := q.Values[metadata.QuotaConnectionCreationRate]
			switch {
			case v <= 0:
			case name == nil:
				t.ipDefault = v
			default:
				if a, ok := metadata.QuotaIPAddr(*name); ok {
					t.ipRate[a] = v
				}
			}
			continue
		}
		var k entityKey
		ok := true
		for typ, name := range q.Entity {
			p := part{kind: def}
			if name != nil {
				p = part{kind: named, name: *name}
			}
			switch typ {
			case metadata.QuotaUser:
				k.user = p
			case metadata.QuotaClientID:
				k.client = p
			default:
				ok = false
			}
		}
		if !ok {
			continue
		}
		var vals [numTypes]float64
		for _, typ := range Types() {
			if v, set := q.Values[typ.Key()]; set && v > 0 {
				vals[typ] = v
				t.any[typ] = true
			}
		}
		t.byEntity[k] = vals
	}
	m.quotas.Store(t)
}

// Enabled reports whether any quota is set.
func (m *Manager) Enabled() bool { return m.quotas.Load().any != [numTypes]bool{} }

// Active reports whether any quota of type t is set: when none is, the
// caller need not measure anything.
func (m *Manager) Active(t Type) bool { return m.quotas.Load().any[t] }

// resolve finds the quota of type t that applies to user and client, in
// Kafka's order of precedence:
//
//	/config/users/<user>/clients/<client-id>
//	/config/users/<user>/clients/<default>
//	/config/users/<user>
//	/config/users/<default>/clients/<client-id>
//	/config/users/<default>/clients/<default>
//	/config/users/<default>
//	/config/clients/<client-id>
//	/config/clients/<default>
//
// and who shares the rate: a quota on a user alone is shared by all of
// that user's client ids, one on a client id alone by all users with it.
func (t *table) resolve(typ Type, user, client string) (bound float64, key sensorKey, ok bool) {
	u, c := part{named, user}, part{named, client}
	levels := [...]struct {
		k           entityKey
		shareUser   bool
		shareClient bool
	}{
		{entityKey{u, c}, true, true},
		{entityKey{u, part{kind: def}}, true, true},
		{entityKey{u, part{}}, true, false},
		{entityKey{part{kind: def}, c}, true, true},
		{entityKey{part{kind: def}, part{kind: def}}, true, true},
		{entityKey{part{kind: def}, part{}}, true, false},
		{entityKey{part{}, c}, false, true},
		{entityKey{part{}, part{kind: def}}, false, true},
	}
	for _, l := range levels {
		vals, found := t.byEntity[l.k]
		if !found || vals[typ] <= 0 {
			continue
		}
		key = sensorKey{typ: typ}
		if l.shareUser {
			key.user = user
		}
		if l.shareClient {
			key.client = client
		}
		return vals[typ], key, true
	}
	return 0, sensorKey{}, false
}

// sensorFor returns the rate of (t, user, client) and its quota; nil if
// no quota applies. Called with mu held.
func (m *Manager) sensorFor(t Type, user, client string, now time.Duration) *sensor {
	bound, key, ok := m.quotas.Load().resolve(t, user, client)
	if !ok {
		return nil
	}
	s := m.sensors[key]
	if s == nil {
		m.sweep(now)
		if len(m.sensors) >= MaxSensors {
			key = sensorKey{typ: t, user: overflowName, client: overflowName}
			s = m.sensors[key]
		}
		if s == nil {
			s = &sensor{}
			m.sensors[key] = s
		}
	}
	s.bound, s.used = bound, now
	return s
}

// sweep forgets rates unused for an hour, at most once a minute (or when
// the table is full).
func (m *Manager) sweep(now time.Duration) { sweepIdle(now, &m.lastSweep, m.sensors) }

// sweepIdle removes the sensors of table unused for sensorIdle, at most
// once a minute (last: when it last did) unless the table is full.
func sweepIdle[K comparable](now time.Duration, last *time.Duration, table map[K]*sensor) {
	if now-*last < time.Minute && len(table) < MaxSensors {
		return
	}
	*last = now
	for k, s := range table {
		if now-s.used > sensorIdle {
			delete(table, k)
		}
	}
}

// Record adds v (bytes, or request-handler percent-seconds) to the rate
// of (t, user, client) and returns how long to throttle the client: 0
// when no quota applies or the rate stays within it.
func (m *Manager) Record(t Type, user, client string, v float64) time.Duration {
	if !m.Active(t) {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	s := m.sensorFor(t, user, client, now)
	if s == nil {
		return 0
	}
	r := &s.rate
	r.record(v, now, m.cfg)
	value := r.measure(now, m.cfg)
	if value <= s.bound {
		return 0
	}
	ws := r.windowSize(now, m.cfg)
	d := time.Duration((value - s.bound) / s.bound * float64(ws))
	if t == Request {
		// Kafka bounds a request-quota throttle to one window.
		d = min(d, m.cfg.WindowSize)
	}
	d = d.Round(time.Millisecond)
	if d <= 0 {
		return 0
	}
	s.throttled++
	s.throttleTime += d
	return d
}

// Unrecord takes back v recorded for (t, user, client): Kafka's answer
// to a throttled fetch carries no data, so its bytes do not count.
func (m *Manager) Unrecord(t Type, user, client string, v float64) {
	if !m.Active(t) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if s := m.sensorFor(t, user, client, now); s != nil {
		s.rate.record(-v, now, m.cfg)
	}
}

// MaxValueInWindow is the most one quota window lets (t, user, client)
// use, Kafka's getMaxValueInQuotaWindow: quota * (num-1) * window. A fetch
// asks for no more bytes than that, so one response can fit.
func (m *Manager) MaxValueInWindow(t Type, user, client string) (float64, bool) {
	if !m.Active(t) {
		return 0, false
	}
	bound, _, ok := m.quotas.Load().resolve(t, user, client)
	if !ok {
		return 0, false
	}
	return bound * float64(m.cfg.WindowNum-1) * m.cfg.WindowSize.Seconds(), true
}

// Mutation is one request's controller mutation quota (KIP-599):
// CreateTopics, CreatePartitions and DeleteTopics ask it before each topic
// and record the partitions they create or delete.
type Mutation struct {
	m            *Manager
	user, client string
	strict       bool
	throttle     time.Duration
}

// Mutation returns the mutation quota of a request. strict (CreateTopics
// v6+, CreatePartitions v3+, DeleteTopics v5+) refuses topics with
// THROTTLING_QUOTA_EXCEEDED while the bucket is in debt; older versions are
// only throttled.
func (m *Manager) Mutation(user, client string, strict bool) *Mutation {
	return &Mutation{m: m, user: user, client: client, strict: strict}
}

// Admit reports whether the next topic may be changed: false, in strict
// mode, while the token bucket is in debt (the topic fails with
// THROTTLING_QUOTA_EXCEEDED and the response is throttled).
func (q *Mutation) Admit() bool {
	if q == nil || !q.strict || !q.m.Active(ControllerMutation) {
		return true
	}
	m := q.m
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	s := m.sensorFor(ControllerMutation, q.user, q.client, now)
	if s == nil {
		return true
	}
	tokens := s.bucket.measure(now, s.bound, m.cfg)
	if tokens >= 0 {
		return true
	}
	q.throttle = max(q.throttle, bucketThrottle(tokens, s.bound))
	s.throttled++
	s.throttleTime += q.throttle
	return false
}

// Record takes n partitions (created or deleted) from the bucket. The
// request's throttle is the debt left, in permissive (old-version) mode.
func (q *Mutation) Record(n int) {
	if q == nil || n <= 0 || !q.m.Active(ControllerMutation) {
		return
	}
	m := q.m
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	s := m.sensorFor(ControllerMutation, q.user, q.client, now)
	if s == nil {
		return
	}
	tokens := s.bucket.record(float64(n), now, s.bound, m.cfg)
	if !q.strict && tokens < 0 {
		d := bucketThrottle(tokens, s.bound)
		if d > q.throttle {
			s.throttled++
			s.throttleTime += d - q.throttle
			q.throttle = d
		}
	}
}

// Throttle is how long the request's response throttles the client.
func (q *Mutation) Throttle() time.Duration {
	if q == nil {
		return 0
	}
	return q.throttle
}

func bucketThrottle(tokens, bound float64) time.Duration {
	return time.Duration(-tokens / bound * float64(time.Second)).Round(time.Millisecond)
}

// Stat is one tracked rate, for metrics.
type Stat struct {
	Type         Type
	User         string // "" when the quota does not name the user
	ClientID     string
	Quota        float64
	Value        float64 // the rate (byte-rate, request-time, mutation-rate); tokens left for ControllerMutation
	Throttled    int64   // responses throttled
	ThrottleTime time.Duration
}

// Stats lists every tracked rate, sorted.
func (m *Manager) Stats() []Stat {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := make([]Stat, 0, len(m.sensors))
	for k, s := range m.sensors {
		st := Stat{Type: k.typ, User: k.user, ClientID: k.client, Quota: s.bound, Throttled: s.throttled, ThrottleTime: s.throttleTime}
		if k.typ == ControllerMutation {
			st.Value = s.bucket.rate(now, m.cfg)
		} else {
			st.Value = s.rate.measure(now, m.cfg)
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		if a.User != b.User {
			return a.User < b.User
		}
		return a.ClientID < b.ClientID
	})
	return out
}

// rate is Kafka's SampledStat Rate: up to num samples, each opened when
// the previous one is a window old; samples older than num windows are
// obsolete (reset); the rate is their sum over the elapsed time since the
// oldest, padded to at least num-1 windows.
type rate struct {
	samples []sample
	cur     int
}

type sample struct {
	start time.Duration
	value float64
}

func (r *rate) record(v float64, now time.Duration, cfg Config) {
	if len(r.samples) == 0 {
		r.samples = append(r.samples, sample{start: now})
		r.cur = 0
	}
	s := &r.samples[r.cur]
	if now-s.start >= cfg.WindowSize {
		r.cur = (r.cur + 1) % cfg.WindowNum
		if r.cur >= len(r.samples) {
			r.samples = append(r.samples, sample{start: now})
		} else {
			r.samples[r.cur] = sample{start: now}
		}
		s = &r.samples[r.cur]
	}
	s.value += v
}

// purge resets the samples older than num windows (Kafka resets them to
// start now).
func (r *rate) purge(now time.Duration, cfg Config) {
	expire := time.Duration(cfg.WindowNum) * cfg.WindowSize
	for i := range r.samples {
		if now-r.samples[i].start >= expire {
			r.samples[i] = sample{start: now}
		}
	}
}

// windowSize is the time the rate is measured over.
func (r *rate) windowSize(now time.Duration, cfg Config) time.Duration {
	r.purge(now, cfg)
	oldest := now
	for _, s := range r.samples {
		oldest = min(oldest, s.start)
	}
	elapsed := now - oldest
	full := int(elapsed / cfg.WindowSize)
	if minFull := cfg.WindowNum - 1; full < minFull {
		elapsed += time.Duration(minFull-full) * cfg.WindowSize
	}
	return max(elapsed, time.Millisecond)
}

// measure is the rate per second.
func (r *rate) measure(now time.Duration, cfg Config) float64 {
	ws := r.windowSize(now, cfg) // purges first
	var total float64
	for _, s := range r.samples {
		total += s.value
	}
	return total / ws.Seconds()
}

// bucket is KIP-599's token bucket: it refills at the quota per second up
// to a burst of num windows' worth, and a mutation takes its partitions
// from it even into debt.
type bucket struct {
	tokens  float64
	last    time.Duration
	started bool
	// recent is what was taken in the last windows, for the mutation-rate
	// metric.
	recent rate
}

func (b *bucket) refill(now time.Duration, bound float64, cfg Config) {
	burst := float64(cfg.ControllerWindowNum) * cfg.ControllerWindowSize.Seconds() * bound
	if !b.started {
		b.tokens, b.started = burst, true
	} else {
		b.tokens = math.Min(burst, b.tokens+bound*(now-b.last).Seconds())
	}
	b.last = now
}

func (b *bucket) measure(now time.Duration, bound float64, cfg Config) float64 {
	b.refill(now, bound, cfg)
	return b.tokens
}

func (b *bucket) record(n float64, now time.Duration, bound float64, cfg Config) float64 {
	b.refill(now, bound, cfg)
	b.tokens -= n
	b.recent.record(n, now, controllerRateConfig(cfg))
	return b.tokens
}

func (b *bucket) rate(now time.Duration, cfg Config) float64 {
	return b.recent.measure(now, controllerRateConfig(cfg))
}

func controllerRateConfig(cfg Config) Config {
	return Config{WindowNum: max(cfg.ControllerWindowNum, 2), WindowSize: cfg.ControllerWindowSize}
}
