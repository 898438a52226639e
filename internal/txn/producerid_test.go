package txn

import (
	"path/filepath"
	"testing"
)

func TestIDAllocatorNeverReuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "producer-ids")
	seen := map[int64]bool{}
	for run := 0; run < 3; run++ {
		a, err := OpenIDAllocator(nil, path)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < IDBlock+7; i++ {
			id, err := a.Next()
			if err != nil {
				t.Fatal(err)
			}
			if seen[id] {
				t.Fatalf("run %d: id %d handed out twice", run, id)
			}
			seen[id] = true
			if !a.Issued(id) {
				t.Fatalf("id %d not reported issued", id)
			}
		}
	}
}
