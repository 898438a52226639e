package raft

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Faults is the fault-injection seam: links between node pairs can be cut,
// delayed or made lossy. One Faults is shared by the hosts of a test; a message on a
// cut link is dropped by the sender (and counted), as a lossy network would.
type Faults struct {
	mu    sync.Mutex
	cut   map[[2]uint64]bool
	delay map[[2]uint64]time.Duration
	loss  map[[2]uint64]float64
	rng   *rand.Rand
}

// NewFaults returns a Faults with every link healthy.
func NewFaults() *Faults {
	return &Faults{
		cut: map[[2]uint64]bool{}, delay: map[[2]uint64]time.Duration{}, loss: map[[2]uint64]float64{},
		rng: rand.New(rand.NewPCG(1, 2)),
	}
}

// Lose drops each frame from a to b with probability p (0 removes it).
func (f *Faults) Lose(from, to uint64, p float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loss[[2]uint64{from, to}] = p
}

// Cut drops all messages between a and b, both ways.
func (f *Faults) Cut(a, b uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut[[2]uint64{a, b}], f.cut[[2]uint64{b, a}] = true, true
}

// Isolate cuts id from every node in others.
func (f *Faults) Isolate(id uint64, others ...uint64) {
	for _, o := range others {
		if o != id {
			f.Cut(id, o)
		}
	}
}

// Delay delays messages from a to b by d (0 removes the delay).
func (f *Faults) Delay(from, to uint64, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay[[2]uint64{from, to}] = d
}

// HealAll restores every link.
func (f *Faults) HealAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.cut)
	clear(f.delay)
	clear(f.loss)
}

func (f *Faults) check(from, to uint64) (cut bool, delay time.Duration) {
	if f == nil {
		return false, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := [2]uint64{from, to}
	if p := f.loss[k]; p > 0 && f.rng.Float64() < p {
		return true, 0
	}
	return f.cut[k], f.delay[k]
}
