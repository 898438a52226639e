package metadata

import (
	"reflect"
	"testing"

	"holdfast/internal/storage"
)

func TestClientQuotaCommands(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, storage.OSFS(), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	alice := "alice"
	e := QuotaEntity{QuotaUser: &alice, QuotaClientID: nil}
	apply := func(end int64, alts ...QuotaAlteration) error {
		_, err := s.Apply(end, Command{Op: OpClientQuotas, Quotas: alts})
		return err
	}
	if err := apply(1, QuotaAlteration{Entity: e, Set: map[string]float64{QuotaProducerByteRate: 1024, QuotaRequestPercentage: 12.5}}); err != nil {
		t.Fatal(err)
	}
	if err := apply(2, QuotaAlteration{Entity: QuotaEntity{QuotaClientID: nil}, Set: map[string]float64{QuotaConsumerByteRate: 1.5}}); err == nil {
		t.Fatal("a fractional byte rate applied")
	}
	ip := "10.0.0.1"
	end := int64(2)
	for what, a := range map[string]QuotaAlteration{
		"ip with user":             {Entity: QuotaEntity{QuotaIP: &ip, QuotaUser: &alice}, Set: map[string]float64{QuotaConnectionCreationRate: 1}},
		"host name":                {Entity: QuotaEntity{QuotaIP: &alice}, Set: map[string]float64{QuotaConnectionCreationRate: 1}},
		"byte rate of an ip":       {Entity: QuotaEntity{QuotaIP: &ip}, Set: map[string]float64{QuotaProducerByteRate: 1}},
		"fractional rate":          {Entity: QuotaEntity{QuotaIP: &ip}, Set: map[string]float64{QuotaConnectionCreationRate: 1.5}},
		"connection rate of alice": {Entity: QuotaEntity{QuotaUser: &alice}, Set: map[string]float64{QuotaConnectionCreationRate: 1}},
	} {
		end++
		if err := apply(end, a); err == nil {
			t.Fatalf("%s: applied", what)
		}
	}
	if err := apply(end+1, QuotaAlteration{Entity: QuotaEntity{QuotaIP: nil}, Set: map[string]float64{QuotaConnectionCreationRate: 5}},
		QuotaAlteration{Entity: QuotaEntity{QuotaIP: &ip}, Set: map[string]float64{QuotaConnectionCreationRate: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := apply(end+2, QuotaAlteration{Entity: e, Remove: []string{QuotaRequestPercentage}}, QuotaAlteration{Entity: QuotaEntity{QuotaIP: nil}, Remove: []string{QuotaConnectionCreationRate}}); err != nil {
		t.Fatal(err)
	}
	want := []ClientQuota{{Entity: e, Values: map[string]float64{QuotaProducerByteRate: 1024}}, {Entity: QuotaEntity{QuotaIP: &ip}, Values: map[string]float64{QuotaConnectionCreationRate: 2}}}
	if got := s.ClientQuotas(); !reflect.DeepEqual(got, want) {
		t.Fatalf("quotas %+v, want %+v", got, want)
	}
	// Persisted with the applied offset.
	closeStore(t, s)
	s2, err := Open(dir, storage.OSFS(), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := s2.ClientQuotas(); !reflect.DeepEqual(got, want) || s2.Applied() != end+2 {
		t.Fatalf("after reopen: %+v (applied %d)", got, s2.Applied())
	}
	// Removing the last key forgets the entity.
	s = s2
	if err := apply(end+3, QuotaAlteration{Entity: e, Remove: []string{QuotaProducerByteRate}}, QuotaAlteration{Entity: QuotaEntity{QuotaIP: &ip}, Remove: []string{QuotaConnectionCreationRate}}); err != nil {
		t.Fatal(err)
	}
	if got := s.ClientQuotas(); len(got) != 0 {
		t.Fatalf("quotas %+v, want none", got)
	}
}
