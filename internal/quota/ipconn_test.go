package quota

import (
	"net/netip"
	"testing"
	"time"

	"holdfast/internal/metadata"
)

// TestConnectionRate: a named ip entity's connection_creation_rate wins
// over the default's; each address is measured alone; past the quota the
// throttle is Kafka's (rate - quota) / quota * window, bounded by the
// windows; and the rate falls back once the address stops.
func TestConnectionRate(t *testing.T) {
	m := New(DefaultConfig()) // 11 windows of 1 s: the rate is over at least 10 s
	now := withClock(m)
	rate := func(v float64) map[string]float64 {
		return map[string]float64{metadata.QuotaConnectionCreationRate: v}
	}
	m.SetQuotas([]metadata.ClientQuota{
		{Entity: metadata.QuotaEntity{"ip": nil}, Values: rate(2)},
		{Entity: metadata.QuotaEntity{"ip": name("10.0.0.1")}, Values: rate(1)},
		{Entity: metadata.QuotaEntity{"user": name("alice")}, Values: map[string]float64{metadata.QuotaProducerByteRate: 5}},
	})
	named, other := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	if q, ok := m.ConnectionQuota(netip.MustParseAddr("::ffff:10.0.0.1")); !ok || q != 1 {
		t.Fatalf("quota of the mapped address: %v %v", q, ok)
	}
	admitted := func(ip netip.Addr, n int) (int, time.Duration) {
		ok, last := 0, time.Duration(0)
		for range n {
			if d := m.RecordConnection(ip); d == 0 {
				ok++
			} else {
				last = d
			}
		}
		return ok, last
	}
	// 10 s of quota at once: 10 connections at 1/s, 20 at 2/s.
	if ok, d := admitted(named, 15); ok != 10 || d <= 0 || d > 11*time.Second {
		t.Fatalf("named: %d admitted (want 10), last throttle %v", ok, d)
	}
	if ok, _ := admitted(other, 25); ok != 20 {
		t.Fatalf("default: %d admitted, want 20", ok)
	}
	if ok, d := admitted(named, 1000); ok != 0 || d != 11*time.Second {
		t.Fatalf("hammering: %d admitted, throttle %v, want none and the 11 s bound", ok, d)
	}
	*now += 12 * time.Second // every window obsolete
	if ok, _ := admitted(named, 1); ok != 1 {
		t.Fatal("not admitted after the windows passed")
	}
	m.SetQuotas(nil)
	if ok, _ := admitted(named, 100); ok != 100 || m.IPQuotaActive() {
		t.Fatalf("without quotas: %d of 100 admitted", ok)
	}
}
