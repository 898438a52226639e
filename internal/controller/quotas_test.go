package controller

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
	if err := apply(3, QuotaAlteration{Entity: QuotaEntity{QuotaIP: nil}, Set: map[string]float64{"connection_creation_rate": 1}}); err == nil {
		t.Fatal("an ip quota applied")
	}
	if err := apply(4, QuotaAlteration{Entity: e, Remove: []string{QuotaRequestPercentage}}); err != nil {
		t.Fatal(err)
	}
	want := []ClientQuota{{Entity: e, Values: map[string]float64{QuotaProducerByteRate: 1024}}}
	if got := s.ClientQuotas(); !reflect.DeepEqual(got, want) {
		t.Fatalf("quotas %+v, want %+v", got, want)
	}
	// Persisted with the applied offset.
	s2, err := Open(dir, storage.OSFS(), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := s2.ClientQuotas(); !reflect.DeepEqual(got, want) || s2.Applied() != 4 {
		t.Fatalf("after reopen: %+v (applied %d)", got, s2.Applied())
	}
	// Removing the last key forgets the entity.
	s = s2
	if err := apply(5, QuotaAlteration{Entity: e, Remove: []string{QuotaProducerByteRate}}); err != nil {
		t.Fatal(err)
	}
	if got := s.ClientQuotas(); len(got) != 0 {
		t.Fatalf("quotas %+v, want none", got)
	}
}
