package quota

import (
	"math"
	"testing"
	"time"

	"holdfast/internal/metadata"
)

func name(s string) *string { return &s }

// fakeClock drives a manager's time by hand.
func withClock(m *Manager) *time.Duration {
	var now time.Duration
	m.now = func() time.Duration { return now }
	return &now
}

func TestPrecedence(t *testing.T) {
	m := New(DefaultConfig())
	q := func(e metadata.QuotaEntity, v float64) metadata.ClientQuota {
		return metadata.ClientQuota{Entity: e, Values: map[string]float64{metadata.QuotaProducerByteRate: v}}
	}
	all := []metadata.ClientQuota{
		q(metadata.QuotaEntity{"user": name("alice"), "client-id": name("app")}, 1),
		q(metadata.QuotaEntity{"user": name("alice"), "client-id": nil}, 2),
		q(metadata.QuotaEntity{"user": name("alice")}, 3),
		q(metadata.QuotaEntity{"user": nil, "client-id": name("app")}, 4),
		q(metadata.QuotaEntity{"user": nil, "client-id": nil}, 5),
		q(metadata.QuotaEntity{"user": nil}, 6),
		q(metadata.QuotaEntity{"client-id": name("app")}, 7),
		q(metadata.QuotaEntity{"client-id": nil}, 8),
	}
	type want struct {
		bound        float64
		user, client string
	}
	wants := []want{
		{1, "alice", "app"}, {2, "alice", "app"}, {3, "alice", ""}, {4, "alice", "app"},
		{5, "alice", "app"}, {6, "alice", ""}, {7, "", "app"}, {8, "", "app"},
	}
	// Remove the most specific quota one at a time: each level takes over
	// in Kafka's order.
	for i := range all {
		m.SetQuotas(all[i:])
		bound, key, ok := m.quotas.Load().resolve(Produce, "alice", "app")
		w := wants[i]
		if !ok || bound != w.bound || key.user != w.user || key.client != w.client {
			t.Errorf("level %d: got %v %q %q %v, want %v", i+1, bound, key.user, key.client, ok, w)
		}
		if _, _, ok := m.quotas.Load().resolve(Fetch, "alice", "app"); ok {
			t.Errorf("level %d: a producer quota applied to fetches", i+1)
		}
	}
	// Another user with the same client id: only the default-user and
	// client-id levels apply to bob.
	m.SetQuotas(all[:3])
	if _, _, ok := m.quotas.Load().resolve(Produce, "bob", "app"); ok {
		t.Error("alice's quotas applied to bob")
	}
	m.SetQuotas(nil)
	if m.Active(Produce) || m.Record(Produce, "alice", "app", 1e9) != 0 {
		t.Error("no quotas, yet throttled")
	}
}

// TestThrottleMath: Kafka's formula, by hand. 100 B/s, 11 windows of 1 s:
// 2000 bytes at once measure 2000 B over the padded 10 s = 200 B/s, and the
// throttle is (200-100)/100 * 10 s = 10 s.
func TestThrottleMath(t *testing.T) {
	m := New(DefaultConfig())
	now := withClock(m)
	*now = time.Hour
	m.SetQuotas([]metadata.ClientQuota{{Entity: metadata.QuotaEntity{"client-id": name("c")}, Values: map[string]float64{metadata.QuotaProducerByteRate: 100}}})
	if d := m.Record(Produce, "ANONYMOUS", "c", 1000); d != 0 {
		t.Fatalf("1000 B within 10 s of 100 B/s throttled %v", d)
	}
	if d := m.Record(Produce, "ANONYMOUS", "c", 1000); d != 10*time.Second {
		t.Fatalf("throttle %v, want 10s", d)
	}
	// Unrecording the last 1000 brings it back within quota.
	m.Unrecord(Produce, "ANONYMOUS", "c", 1000)
	if d := m.Record(Produce, "ANONYMOUS", "c", 0); d != 0 {
		t.Fatalf("after unrecord: throttle %v", d)
	}
}

// TestObedientClientRate: a client that sends as fast as its throttles let
// it ends up at its quota over a long run, whatever its request size.
func TestObedientClientRate(t *testing.T) {
	for _, size := range []float64{100, 5000, 40000} {
		m := New(DefaultConfig())
		now := withClock(m)
		*now = time.Hour
		start := *now
		const quota = 10000.0
		m.SetQuotas([]metadata.ClientQuota{{Entity: metadata.QuotaEntity{"user": nil}, Values: map[string]float64{metadata.QuotaProducerByteRate: quota}}})
		var sent float64
		for *now-start < 10*time.Minute {
			sent += size
			d := m.Record(Produce, "u", "c", size)
			*now += d + time.Millisecond // the throttle, then 1 ms of work
		}
		got := sent / (*now - start).Seconds()
		if got > quota*1.02 || got < quota*0.9 {
			t.Errorf("request size %v: rate %.0f B/s, quota %v", size, got, quota)
		}
	}
}

func TestRequestThrottleBounded(t *testing.T) {
	m := New(DefaultConfig())
	now := withClock(m)
	*now = time.Hour
	m.SetQuotas([]metadata.ClientQuota{{Entity: metadata.QuotaEntity{"user": name("u")}, Values: map[string]float64{metadata.QuotaRequestPercentage: 1}}})
	// 5 s of handler time in percent-seconds: far over 1 %.
	if d := m.Record(Request, "u", "any", 500); d != time.Second {
		t.Fatalf("request throttle %v, want one window (1s)", d)
	}
}

// TestMutationBucket: KIP-599. 2 partitions/s with 11 windows of 1 s is a
// burst of 22; a request that overdraws is accepted, the next (strict) one
// is refused until the debt is repaid.
func TestMutationBucket(t *testing.T) {
	m := New(DefaultConfig())
	now := withClock(m)
	*now = time.Hour
	m.SetQuotas([]metadata.ClientQuota{{Entity: metadata.QuotaEntity{"user": name("u")}, Values: map[string]float64{metadata.QuotaControllerMutationRate: 2}}})
	q := m.Mutation("u", "c", true)
	if !q.Admit() {
		t.Fatal("full bucket refused")
	}
	q.Record(30) // 22 - 30 = -8
	if q.Throttle() != 0 {
		t.Fatalf("strict: accepted request throttled %v", q.Throttle())
	}
	if q.Admit() {
		t.Fatal("bucket in debt admitted")
	}
	if q.Throttle() != 4*time.Second { // 8 tokens at 2/s
		t.Fatalf("throttle %v, want 4s", q.Throttle())
	}
	*now += 4 * time.Second
	if q2 := m.Mutation("u", "c", true); !q2.Admit() {
		t.Fatal("debt repaid, still refused")
	}
	// Permissive (old versions): never refused, throttled by the debt.
	p := m.Mutation("u", "c", false)
	if !p.Admit() {
		t.Fatal("permissive refused")
	}
	p.Record(10)
	if p.Throttle() != 5*time.Second {
		t.Fatalf("permissive throttle %v, want 5s", p.Throttle())
	}
	// Another user has no quota.
	if o := m.Mutation("other", "c", true); !o.Admit() || o.Throttle() != 0 {
		t.Fatal("unquota'd user throttled")
	}
}

func TestMaxValueInWindow(t *testing.T) {
	m := New(DefaultConfig())
	m.SetQuotas([]metadata.ClientQuota{{Entity: metadata.QuotaEntity{"client-id": nil}, Values: map[string]float64{metadata.QuotaConsumerByteRate: 1000}}})
	v, ok := m.MaxValueInWindow(Fetch, "u", "x")
	if !ok || math.Abs(v-10000) > 1e-9 {
		t.Fatalf("max in window %v %v, want 10000", v, ok)
	}
	if _, ok := m.MaxValueInWindow(Produce, "u", "x"); ok {
		t.Fatal("no produce quota, yet a window maximum")
	}
}

func TestSensorsExpireAndOverflow(t *testing.T) {
	m := New(DefaultConfig())
	now := withClock(m)
	*now = time.Hour
	m.SetQuotas([]metadata.ClientQuota{{Entity: metadata.QuotaEntity{"client-id": nil}, Values: map[string]float64{metadata.QuotaProducerByteRate: 1000}}})
	m.Record(Produce, "u", "a", 1)
	if len(m.Stats()) != 1 {
		t.Fatalf("stats %v", m.Stats())
	}
	*now += 2 * time.Hour
	m.Record(Produce, "u", "b", 1)
	st := m.Stats()
	if len(st) != 1 || st[0].ClientID != "b" {
		t.Fatalf("after an idle hour: %+v", st)
	}
}
