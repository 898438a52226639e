package metadata

import (
	"hash/maphash"
	"slices"
)

// pmap is a persistent hash map from K to *Topic: set and del return a new
// map that shares every node but the path to the changed key (a 32-way
// hash trie, leaves of up to pmapLeaf entries). An image's topic indexes
// are two of these, so applying one command copies a few hundred bytes of
// trie, not the cluster's topic list.
type pmap[K comparable] struct {
	root *pnode[K]
	n    int
}

type pnode[K comparable] struct {
	kids *[32]*pnode[K] // an interior node; nil for a leaf
	ents []pent[K]
}

type pent[K comparable] struct {
	h uint64
	k K
	v *Topic
}

const (
	pmapLeaf  = 8
	pmapDepth = 12 // 5 bits a level of a 64-bit hash; deeper leaves only hold collisions
)

// pmapSeed is per process: the trie's shape is never persisted.
var pmapSeed = maphash.MakeSeed()

func pmapHash[K comparable](k K) uint64 { return maphash.Comparable(pmapSeed, k) }

func (m pmap[K]) len() int { return m.n }

func (m pmap[K]) get(k K) (*Topic, bool) {
	h := pmapHash(k)
	n := m.root
	for d := 0; n != nil; d++ {
		if n.kids == nil {
			for _, e := range n.ents {
				if e.h == h && e.k == k {
					return e.v, true
				}
			}
			return nil, false
		}
		n = n.kids[(h>>(5*d))&31]
	}
	return nil, false
}

// set returns m with k mapped to v.
func (m pmap[K]) set(k K, v *Topic) pmap[K] {
	root, added := pset(m.root, 0, pent[K]{h: pmapHash(k), k: k, v: v})
	if added {
		m.n++
	}
	m.root = root
	return m
}

func pset[K comparable](n *pnode[K], d int, e pent[K]) (*pnode[K], bool) {
	if n == nil {
		return &pnode[K]{ents: []pent[K]{e}}, true
	}
	if n.kids != nil {
		kids := *n.kids
		i := (e.h >> (5 * d)) & 31
		var added bool
		kids[i], added = pset(kids[i], d+1, e)
		return &pnode[K]{kids: &kids}, added
	}
	for i, o := range n.ents {
		if o.h == e.h && o.k == e.k {
			ents := slices.Clone(n.ents)
			ents[i] = e
			return &pnode[K]{ents: ents}, false
		}
	}
	if len(n.ents) < pmapLeaf || d >= pmapDepth {
		ents := make([]pent[K], len(n.ents), len(n.ents)+1)
		copy(ents, n.ents)
		return &pnode[K]{ents: append(ents, e)}, true
	}
	// Split the full leaf into an interior node.
	split := &pnode[K]{kids: new([32]*pnode[K])}
	for _, o := range append(slices.Clip(n.ents), e) {
		i := (o.h >> (5 * d)) & 31
		split.kids[i], _ = pset(split.kids[i], d+1, o)
	}
	return split, true
}

// del returns m without k.
func (m pmap[K]) del(k K) pmap[K] {
	root, removed := pdel(m.root, 0, pmapHash(k), k)
	if removed {
		m.n--
		m.root = root
	}
	return m
}

func pdel[K comparable](n *pnode[K], d int, h uint64, k K) (*pnode[K], bool) {
	if n == nil {
		return nil, false
	}
	if n.kids != nil {
		i := (h >> (5 * d)) & 31
		kid, removed := pdel(n.kids[i], d+1, h, k)
		if !removed {
			return n, false
		}
		kids := *n.kids
		kids[i] = kid
		return &pnode[K]{kids: &kids}, true
	}
	for i, o := range n.ents {
		if o.h == h && o.k == k {
			if len(n.ents) == 1 {
				return nil, true
			}
			ents := make([]pent[K], 0, len(n.ents)-1)
			ents = append(append(ents, n.ents[:i]...), n.ents[i+1:]...)
			return &pnode[K]{ents: ents}, true
		}
	}
	return n, false
}

// each calls fn for every value, in no particular order.
func (m pmap[K]) each(fn func(*Topic)) {
	var walk func(*pnode[K])
	walk = func(n *pnode[K]) {
		if n == nil {
			return
		}
		if n.kids != nil {
			for _, k := range n.kids {
				walk(k)
			}
			return
		}
		for _, e := range n.ents {
			fn(e.v)
		}
	}
	walk(m.root)
}
