package metadata

import (
	"maps"
	"path/filepath"
	"sync"
	"testing"

	"holdfast/internal/storage"
)

// BrokerConfigs hands out the state's own map of a scope without a copy
// (the broker's DescribeConfigs and the replica manager's dynamic topic
// defaults read it on other goroutines than the metadata apply): that is
// safe only while Apply replaces a scope's map whole and never edits one
// in place, and never keeps the proposer's map. Under go test -race the
// readers below would report an in-place edit.
func TestBrokerConfigsCopyOnWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	s := open(t, storage.OSFS(), dir)
	setBC := func(scope string, configs map[string]string) {
		t.Helper()
		if _, err := apply(s, Command{Op: OpBrokerConfigs, Name: scope, Configs: configs}); err != nil {
			t.Fatalf("broker configs %q: %v", scope, err)
		}
	}
	proposed := map[string]string{"log.retention.ms": "1000"}
	setBC("", proposed)
	setBC("1", map[string]string{"min.insync.replicas": "2"})
	proposed["log.retention.ms"] = "5" // the proposer's map is not the state's
	held := s.BrokerConfigs("")
	if got := held["log.retention.ms"]; got != "1000" {
		t.Fatalf("cluster default log.retention.ms %q after the proposer edited its map, want 1000", got)
	}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, scope := range []string{"", "1"} {
					for k, v := range s.BrokerConfigs(scope) {
						_, _ = k, v
					}
				}
				for k, v := range held {
					_, _ = k, v
				}
			}
		})
	}
	for i := range 60 {
		switch i % 3 {
		case 0:
			setBC("", map[string]string{"log.retention.ms": "1000", "log.segment.bytes": "1048576"})
		case 1:
			setBC("1", nil) // removes the scope
		default:
			setBC("1", map[string]string{"min.insync.replicas": "1"})
		}
	}
	close(stop)
	wg.Wait()

	if want := map[string]string{"log.retention.ms": "1000"}; !maps.Equal(held, want) {
		t.Fatalf("a map handed out earlier changed to %v, want %v", held, want)
	}
	if got := s.BrokerConfigs("1"); !maps.Equal(got, map[string]string{"min.insync.replicas": "1"}) {
		t.Fatalf("broker 1's configs %v", got)
	}
	closeStore(t, s) // a clean stop: its last snapshot holds everything
	s2 := open(t, storage.OSFS(), dir)
	if got, want := s2.BrokerConfigs(""), map[string]string{"log.retention.ms": "1000", "log.segment.bytes": "1048576"}; !maps.Equal(got, want) {
		t.Fatalf("cluster default after reopen %v, want %v", got, want)
	}
}
