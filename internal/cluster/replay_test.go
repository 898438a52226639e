package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// syncBuffer is a log sink the broker's goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRestartReplaysNoSideEffects: the metadata entries Raft delivers again
// after a restart (at or below the applied offset) change nothing and say
// nothing: before, the apply loop logged `created topic topic=""`,
// `deleted topic topic=""` and `added partitions from=3 to=0` for them and
// handed an empty topic to the replicas (QueueOpenTopic, RemoveTopic).
func TestRestartReplaysNoSideEffects(t *testing.T) {
	logs := new(syncBuffer)
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	ctx := context.Background()
	// Raft delivers again what it committed last before the stop: one
	// restart after each kind of change.
	steps := []struct {
		name   string
		change func(*kadm.Client) error
	}{
		{"create", func(adm *kadm.Client) error {
			_, err := adm.CreateTopic(ctx, 3, 1, nil, "kept")
			if err == nil {
				_, err = adm.CreateTopic(ctx, 1, 1, nil, "gone")
			}
			return err
		}},
		{"add partitions", func(adm *kadm.Client) error {
			_, err := adm.CreatePartitions(ctx, 2, "kept")
			return err
		}},
		{"delete", func(adm *kadm.Client) error {
			_, err := adm.DeleteTopics(ctx, "gone")
			return err
		}},
	}
	for i, s := range steps {
		adm := n.Admin()
		if err := s.change(adm); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		adm.Close()
		restarted := len(logs.String())
		n.Restart()
		// A change proposed after the restart is applied after every
		// earlier entry: once it returns, any replay is over.
		adm = n.Admin()
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, fmt.Sprintf("after-%d", i)); err != nil {
			t.Fatal(err)
		}
		adm.Close()
		out := logs.String()[restarted:]
		for _, bad := range []*regexp.Regexp{
			regexp.MustCompile(`created topic" topic=(""|kept|gone) `),
			regexp.MustCompile(`deleted topic" topic=(""|gone) `),
			regexp.MustCompile(`added partitions" topic=(""|kept) `),
		} {
			if m := bad.FindString(out); m != "" {
				t.Errorf("after %s and a restart, a replayed entry had an effect: %q", s.name, m)
			}
		}
	}
	md, err := kadm.NewClient(n.Client()).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(md["kept"].Partitions) != 5 || md.Has("gone") || !md.Has("after-2") {
		t.Errorf("after the restart: %v", md.Names())
	}
}
