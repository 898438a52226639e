package faulttest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/verify"
)

// The fault tests check with internal/verify, the checker of `holdfast
// verify` and `holdfast lab`; this file only ties it to a test (failures
// fail the test, producers and consumers end with it).

// ID names one record of a run.
type ID = verify.ID

// Result is the outcome of a check.
type Result = verify.Report

// Checker records every acknowledged record of a run and, at the end, reads
// the topic back and reports what is missing, doubled or out of order.
type Checker struct {
	*verify.Run
	t testing.TB
}

// NewChecker starts a run on topic; records of other runs in the topic are
// ignored.
func NewChecker(t testing.TB, topic string) *Checker {
	r := verify.NewRun(topic)
	r.Logf = t.Logf
	return &Checker{Run: r, t: t}
}

// WaitAcked waits until at least n more records than now are acknowledged,
// and fails the test if that takes longer than timeout: the cluster did
// not recover.
func (c *Checker) WaitAcked(n int64, timeout time.Duration, what string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.Run.WaitAcked(ctx, c.Acked()+n); err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
}

// Producer writes records to the checker's topic without pause until Stop.
type Producer = verify.Producer

// StartProducer produces with cl (configured by the caller: acks,
// idempotence, timeouts) at about rate records per second (0: as fast as
// the client's buffer allows). The producer owns cl: Stop, or the end of
// the test, closes it.
func (c *Checker) StartProducer(cl *kgo.Client, rate int) *Producer {
	p := c.Run.StartProducer(cl, verify.ProducerConfig{Rate: rate})
	c.t.Cleanup(func() { p.Stop(0) })
	return p
}

// Check reads the whole topic with a fresh client seeded from bootstrap,
// from the log start up to the high watermarks at the time of the call, and
// compares it with the acknowledgements. Stop every producer first.
func (c *Checker) Check(bootstrap string, timeout time.Duration) (Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Run.Check(ctx, verify.CheckOptions{Seeds: strings.Split(bootstrap, ",")})
}

// RequireOK fails the test unless r passes.
func RequireOK(t testing.TB, r Result, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	t.Logf("check: %v", r)
	if !r.OK() {
		t.Fatalf("check failed: %v", r)
	}
	if r.Acked == 0 {
		t.Fatal("check: nothing was acknowledged, the test proved nothing")
	}
}

// GroupConsumer reads the checker's topic in a consumer group while the
// faults happen.
type GroupConsumer struct {
	*verify.GroupConsumer
}

// StartGroupConsumer polls with cl, which must be configured with a
// consumer group on the checker's topic (committing as it goes). The
// consumer owns cl.
func (c *Checker) StartGroupConsumer(cl *kgo.Client) *GroupConsumer {
	g := c.Run.StartGroupConsumer(cl, false, nil)
	c.t.Cleanup(g.Stop)
	return &GroupConsumer{g}
}

// WaitAll waits up to timeout until the group has read every acknowledged
// record, and returns how many it has not, a sample of them, and how many
// times it read a record again.
func (g *GroupConsumer) WaitAll(timeout time.Duration) (missing int, sample []string, redelivered int) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	missing, sample = g.GroupConsumer.WaitAll(ctx)
	return missing, sample, g.Tally().Report(nil).Duplicated
}
