package metadata

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestPmap: random sets and deletes agree with a Go map, and every older
// version still reads as it was (persistence: a change never reaches an
// image taken before it).
func TestPmap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var m pmap[string]
	ref := map[string]*Topic{}
	type version struct {
		m   pmap[string]
		ref map[string]*Topic
	}
	var versions []version
	for i := range 20000 {
		k := fmt.Sprintf("k%d", r.IntN(3000))
		if r.IntN(3) == 0 {
			m = m.del(k)
			delete(ref, k)
		} else {
			v := &Topic{Name: k, Partitions: int32(i)}
			m = m.set(k, v)
			ref[k] = v
		}
		if i%2000 == 0 {
			c := make(map[string]*Topic, len(ref))
			for k, v := range ref {
				c[k] = v
			}
			versions = append(versions, version{m, c})
		}
	}
	versions = append(versions, version{m, ref})
	for vi, v := range versions {
		if v.m.len() != len(v.ref) {
			t.Fatalf("version %d: len %d, want %d", vi, v.m.len(), len(v.ref))
		}
		n := 0
		v.m.each(func(tp *Topic) {
			n++
			if v.ref[tp.Name] != tp {
				t.Fatalf("version %d: each gave %s=%d, want %v", vi, tp.Name, tp.Partitions, v.ref[tp.Name])
			}
		})
		if n != len(v.ref) {
			t.Fatalf("version %d: each visited %d, want %d", vi, n, len(v.ref))
		}
		for k := range 3000 {
			key := fmt.Sprintf("k%d", k)
			got, ok := v.m.get(key)
			if want, wok := v.ref[key]; ok != wok || got != want {
				t.Fatalf("version %d: get(%s) = %v %v, want %v %v", vi, key, got, ok, want, wok)
			}
		}
	}
}
