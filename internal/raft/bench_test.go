package raft

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCommit: committed proposals per second and commit latency
// (Propose to WaitCommitted) of 1 KiB batches on 3 hosts over loopback TCP,
// flush=sync, with 64 proposals in flight spread over the groups. ack=ready
// wakes a proposal's waiter when the Ready loop delivers the entry,
// ack=quorum when the leader sees Raft's commit index pass it
// (GroupConfig.AckOnQuorum, what partitions use); compare them with
// benchstat -col /ack.
//
//	go test ./internal/raft -run '^$' -bench Commit -benchtime 5000x
func BenchmarkCommit(b *testing.B) {
	for _, groups := range []int{1, 32} {
		for _, quorum := range []bool{false, true} {
			name := map[bool]string{false: "ready", true: "quorum"}[quorum]
			b.Run(fmt.Sprintf("groups=%d/ack=%s", groups, name), func(b *testing.B) {
				benchCommit(b, groups, 64, quorum)
			})
		}
	}
}

func benchCommit(b *testing.B, groups, inflight int, quorum bool) {
	c := newCluster(b, 3, groups, func(c *cluster) { c.ackOnQuorum = quorum })
	leaders := make([]atomic.Uint64, groups+1)
	for _, g := range c.groups {
		id, _ := c.waitLeader(g)
		leaders[g].Store(id)
		c.propose(g, "warm-up")
	}
	value := strings.Repeat("x", 1024)
	var next atomic.Int64
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range inflight {
		wg.Go(func() {
			bt := batch(b, value)
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				g := c.groups[int(i)%groups]
				for {
					id := leaders[g].Load()
					t0 := time.Now()
					p, err := c.nodes[id].host.Propose(context.Background(), g, bt)
					if err == nil {
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						err = c.nodes[id].host.WaitCommitted(ctx, p)
						cancel()
					}
					if err == nil {
						lat[i] = time.Since(t0)
						break
					}
					if l, _ := c.leader(g); l != 0 {
						leaders[g].Store(l)
					}
					time.Sleep(time.Millisecond) // a benchmark's retry pause while a leader is elected
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(b.N)*1024/elapsed.Seconds()/1e6, "MB/s")
}

// BenchmarkReadyManyGroups: the cost per batch of the Ready cycle when
// many groups each take one small batch per cycle - what 1,000 partitions
// on one node see (issue 17): one host, each group its only voter
// (AckOnQuorum, flush=sync, real logs in a temp dir sharing one Syncer).
// Each round proposes one 1 KiB batch to every group from one goroutine
// (as a connection's read loop does for a multi-partition produce), then
// waits for all to commit; ns/op is per batch, all of the cycle included
// (propose, Ready, write-out, syncfs, delivery, apply). cpu-ns/op is the
// process's user + system CPU time per batch (getrusage): on a shared,
// noisy machine the steadier figure, since the wall time is mostly the
// fsync's.
//
//	go test ./internal/raft -run '^$' -bench ReadyManyGroups -count 6 | tee new.txt; benchstat old.txt new.txt
//
// depth=2 keeps two rounds in flight (a round's proposals go in before the
// previous round's are waited for), as a producer with several requests in
// flight does: a group's next proposal arrives while its last one is being
// stored and applied.
func BenchmarkReadyManyGroups(b *testing.B) {
	for _, groups := range []int{100, 1000} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) { benchReadyManyGroups(b, groups, 1) })
	}
	b.Run("groups=1000/depth=2", func(b *testing.B) { benchReadyManyGroups(b, 1000, 2) })
}

func benchReadyManyGroups(b *testing.B, groups, depth int) {
	c := newCluster(b, 1, groups, func(c *cluster) { c.ackOnQuorum = true })
	h := c.nodes[1].host
	for _, g := range c.groups {
		c.waitLeader(g)
		c.propose(g, "warm-up")
	}
	bt := batch(b, strings.Repeat("x", 1024))
	var rounds [][]Proposal // in flight, oldest first
	ctx := context.Background()
	wait := func(ps []Proposal) {
		for _, p := range ps {
			if err := h.WaitCommitted(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for done := 0; done < b.N; {
		n := min(groups, b.N-done)
		ps := make([]Proposal, n)
		for i, g := range c.groups[:n] {
			p, err := h.Propose(ctx, g, bt)
			if err != nil {
				b.Fatal(err)
			}
			ps[i] = p
		}
		rounds = append(rounds, ps)
		if len(rounds) >= depth {
			wait(rounds[0])
			rounds = rounds[1:]
		}
		done += n
	}
	for _, ps := range rounds {
		wait(ps)
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
