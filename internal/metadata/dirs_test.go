package metadata

import (
	"encoding/json"
	"testing"
)

// TestPartitionDirsJSON: the slice encodes as the map did, so metadata
// files and commands written before it read back the same, and a file
// written now is what an older binary wrote.
func TestPartitionDirsJSON(t *testing.T) {
	type oldTopic struct {
		Dirs []map[int32]string `json:",omitempty"`
	}
	type newTopic struct {
		Dirs []PartitionDirs `json:",omitempty"`
	}
	cases := []struct {
		old oldTopic
		new newTopic
	}{
		{oldTopic{}, newTopic{}},
		{
			oldTopic{Dirs: []map[int32]string{{1: "a"}, nil, {2: "b", 10: "c\"<x>", 3: "d"}, {}}},
			newTopic{Dirs: []PartitionDirs{{{1, "a"}}, nil, {{2, "b"}, {10, "c\"<x>"}, {3, "d"}}, {}}},
		},
	}
	for _, c := range cases {
		want, err := json.MarshalIndent(c.old, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.MarshalIndent(c.new, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("encoded\n%s\nwant (the map's)\n%s", got, want)
		}
		var back newTopic
		if err := json.Unmarshal(want, &back); err != nil {
			t.Fatal(err)
		}
		for p, d := range c.old.Dirs {
			if len(back.Dirs[p]) != len(d) || (d == nil) != (back.Dirs[p] == nil) {
				t.Fatalf("partition %d: read %v from %s, want %v", p, back.Dirs[p], want, d)
			}
			for b, dir := range d {
				if !back.Dirs[p].Has(b) || back.Dirs[p].Get(b) != dir {
					t.Fatalf("partition %d broker %d: read %v, want %q", p, b, back.Dirs[p], dir)
				}
			}
		}
		if len(back.Dirs) != len(c.old.Dirs) {
			t.Fatalf("read %d partitions, want %d", len(back.Dirs), len(c.old.Dirs))
		}
	}
}
