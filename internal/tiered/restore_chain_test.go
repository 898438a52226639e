package tiered

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// memStore is an object store in a map, for the restore's listing logic
// (the end-to-end restore runs against a real S3 server: restore_test.go).
type memStore map[string][]byte

func (s memStore) PutStream(context.Context, string, io.ReadSeeker, int64) error {
	return errors.New("unused")
}
func (s memStore) Put(_ context.Context, k string, b []byte) error {
	s[k] = b
	return nil
}
func (s memStore) GetTo(context.Context, string, io.Writer, int64) (int64, error) {
	return 0, errors.New("unused")
}
func (s memStore) Get(_ context.Context, k string, _ int64) ([]byte, error) {
	b, ok := s[k]
	if !ok {
		return nil, errors.New("no such key")
	}
	return b, nil
}
func (s memStore) Delete(_ context.Context, k string) error { delete(s, k); return nil }
func (s memStore) List(_ context.Context, prefix string) ([]string, error) {
	var keys []string
	for k := range s {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

const testDir = "t-AAAAAAAAAAAAAAAAAAAAAA"

// put stores a segment's two objects (logToo=false: only its .index, an
// upload that did not finish).
func (s memStore) put(part int32, base, next int64, epoch int32, logToo bool) {
	sc := sidecar{Topic: "t", TopicID: testDir[2:], Partition: part,
		Segment: Segment{Base: base, Next: next, Epoch: epoch, Epochs: [][2]int64{{int64(epoch), base}}}}
	b, _ := json.Marshal(sc)
	key := fmt.Sprintf("p/%s/%d/%020d-%d", testDir, part, base, epoch)
	s[key+".index"] = b
	if logToo {
		s[key+".log"] = []byte("x")
	}
}

// TestRestoreChain: the restore chains a partition's segments back from
// the one that ends highest: overlapping copies (two leaders' uploads of
// the same offsets) give one chain, the highest epoch among equal ends;
// below a gap nothing is restored; a segment without its .log is not
// used; the partition count is the highest partition with objects + 1,
// the start epoch the highest epoch in the chain.
func TestRestoreChain(t *testing.T) {
	s := memStore{}
	// Partition 0: [0,10)e1 [10,20)e1, [10,20)e2 (a second leader's copy),
	// [20,30)e2, and [20,40)e3 without its .log.
	s.put(0, 0, 10, 1, true)
	s.put(0, 10, 20, 1, true)
	s.put(0, 10, 20, 2, true)
	s.put(0, 20, 30, 2, true)
	s.put(0, 20, 40, 3, false)
	// Partition 2: [0,5) then a gap, [8,12) [12,15).
	s.put(2, 0, 5, 1, true)
	s.put(2, 8, 12, 4, true)
	s.put(2, 12, 15, 4, true)
	m := &Manager{cfg: Config{Prefix: "p/"}, store: s}
	ctx := context.Background()

	dir, starts, _, err := m.PlanRestore(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if dir != testDir || len(starts) != 3 {
		t.Fatalf("plan: %s %+v", dir, starts)
	}
	if starts[0].Offset != 30 || starts[0].Epoch != 2 || starts[1].Offset != 0 || starts[2].Offset != 15 || starts[2].Epoch != 4 {
		t.Fatalf("starts %+v", starts)
	}
	parts, err := m.listRestore(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	mf, _, err := m.restoredManifest(ctx, dir, 0, parts[0], 30)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sg := range mf.Segments {
		got = append(got, fmt.Sprintf("[%d,%d)e%d", sg.Base, sg.Next, sg.Epoch))
		if sg.Dir != dir {
			t.Fatalf("segment %+v keeps no directory", sg)
		}
	}
	if want := "[0,10)e1 [10,20)e2 [20,30)e2"; strings.Join(got, " ") != want || mf.Start != 0 {
		t.Fatalf("partition 0 chain %v from %d, want %s", got, mf.Start, want)
	}
	if _, _, err := decodeManifest(mustEncode(t, mf)); err != nil {
		t.Fatal(err)
	}
	mf, _, err = m.restoredManifest(ctx, dir, 2, parts[2], 15)
	if err != nil || mf.Start != 8 || len(mf.Segments) != 2 {
		t.Fatalf("partition 2 (a gap below 8): %+v %v", mf, err)
	}
	if _, _, err := m.restoredManifest(ctx, dir, 0, parts[0], 25); err == nil {
		t.Fatal("a chain ending where no segment ends")
	}

	// Two incarnations: the name alone is refused, the directory is not.
	s.put(0, 0, 10, 1, true)
	s["p/t-BBBBBBBBBBBBBBBBBBBBBB/0/00000000000000000000-1.index"] = s[fmt.Sprintf("p/%s/0/%020d-1.index", testDir, 0)]
	if _, _, _, err := m.PlanRestore(ctx, "t"); err == nil || !strings.Contains(err.Error(), "several incarnations") {
		t.Fatalf("two incarnations: %v", err)
	}
	if _, _, _, err := m.PlanRestore(ctx, testDir); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := m.PlanRestore(ctx, "none"); err == nil {
		t.Fatal("a topic with no objects restored")
	}
}

func mustEncode(t *testing.T, mf Manifest) []byte {
	t.Helper()
	b, err := encodeManifest(mf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
