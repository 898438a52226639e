package datadir

import (
	"errors"
	"strings"
	"testing"

	"holdfast/internal/storage"
)

func TestOpenWriteReopen(t *testing.T) {
	fsys := storage.NewCrashFS(1)
	id, err := Open(fsys, "/d", 3)
	if err != nil {
		t.Fatal(err)
	}
	if id.NodeID != 3 || id.DirectoryID.IsZero() || id.Formatted() {
		t.Fatalf("new identity %+v", id)
	}
	fsys.Crash() // the new directory id is durable before anyone hears it
	again, err := Open(fsys, "/d", 3)
	if err != nil || again.DirectoryID != id.DirectoryID {
		t.Fatalf("reopened %+v, %v; want directory %s", again, err, id.DirectoryID)
	}
	id.ClusterID = "x"
	id.Bootstrap = map[int32]UUID{1: NewUUID(), 3: id.DirectoryID}
	if err := Write(fsys, "/d", id); err != nil {
		t.Fatal(err)
	}
	got, err := Open(fsys, "/d", 3)
	if err != nil || got.ClusterID != "x" || !got.BootstrapMember() || len(got.Bootstrap) != 2 {
		t.Fatalf("after format: %+v, %v", got, err)
	}
	if _, err := Open(fsys, "/d", 4); err == nil || !strings.Contains(err.Error(), "belongs to node 3") {
		t.Fatalf("another node's directory: %v", err)
	}
}

func TestOpenRefusesOldClusterFormat(t *testing.T) {
	fsys := storage.NewCrashFS(1)
	fsys.MkdirAll("/d", 0o755)
	fsys.WriteFileForTest("/d/raft-state.journal", []byte{1})
	if _, err := Open(fsys, "/d", 1); !errors.Is(err, ErrLegacy) {
		t.Fatalf("old cluster directory: %v", err)
	}
}

func TestJoin(t *testing.T) {
	a, b, c, c2 := NewUUID(), NewUUID(), NewUUID(), NewUUID()
	voters := []int32{1, 2, 3}
	self := Identity{NodeID: 3, DirectoryID: c}
	// Not everyone heard, nobody formatted: wait.
	if _, ok, why := Join(self, voters, map[int32]Peer{1: {DirectoryID: a}}); ok || !strings.Contains(why, "2") {
		t.Fatalf("formed without node 2: %v %q", ok, why)
	}
	// Everyone fresh: all three compute the same cluster.
	heard := map[int32]Peer{1: {DirectoryID: a}, 2: {DirectoryID: b}}
	out, ok, _ := Join(self, voters, heard)
	if !ok || !out.BootstrapMember() || out.ClusterID != ClusterIDFor(map[int32]UUID{1: a, 2: b, 3: c}) {
		t.Fatalf("forming: %+v %v", out, ok)
	}
	other, _, _ := Join(Identity{NodeID: 1, DirectoryID: a}, voters, map[int32]Peer{2: {DirectoryID: b}, 3: {DirectoryID: c}})
	if other.ClusterID != out.ClusterID {
		t.Fatal("two nodes formed different clusters")
	}
	// A bootstrap member that crashed before writing its cluster id joins
	// as one.
	formed := map[int32]Peer{1: {ClusterID: out.ClusterID, DirectoryID: a, Bootstrap: out.Bootstrap}}
	if got, ok, _ := Join(self, voters, formed); !ok || !got.BootstrapMember() || got.ClusterID != out.ClusterID {
		t.Fatalf("late bootstrap member: %+v %v", got, ok)
	}
	// A replaced disk: same node, new directory: joins, not a member.
	if got, ok, _ := Join(Identity{NodeID: 3, DirectoryID: c2}, voters, formed); !ok || got.BootstrapMember() || got.ClusterID != out.ClusterID {
		t.Fatalf("replaced disk: %+v %v", got, ok)
	}
	// A broker-only node only joins.
	if _, ok, _ := Join(Identity{NodeID: 7, DirectoryID: NewUUID()}, voters, heard); ok {
		t.Fatal("a broker-only node formed a cluster")
	}
	// Peers in two clusters: refuse to choose.
	split := map[int32]Peer{1: {ClusterID: "x"}, 2: {ClusterID: "y"}}
	if _, ok, why := Join(self, voters, split); ok || !strings.Contains(why, "disagree") {
		t.Fatalf("split: %v %q", ok, why)
	}
}

// TestOpenRefusesNewerFormat: a meta.properties whose holdfast.format or
// Kafka version is newer than this binary's is refused with an error that
// names the file, the field, the version found and the versions known (not
// ErrLegacy, which says "older"), and the file is unchanged. A file
// without the Kafka version line still opens.
func TestOpenRefusesNewerFormat(t *testing.T) {
	const dirID = "AAAAAAAAAAAAAAAAAAAAAQ"
	for _, tc := range []struct {
		name, file string
		want       []string // empty: opens
	}{
		{"format+1", "version=1\nnode.id=1\ndirectory.id=" + dirID + "\nholdfast.format=3\n", []string{"holdfast.format: format version 3, this binary reads version 2"}},
		{"format+1, other fields changed", "version=1\nholdfast.format=3\nnode=1\n", []string{"holdfast.format: format version 3"}},
		{"version+1", "version=2\nnode.id=1\ndirectory.id=" + dirID + "\nholdfast.format=2\n", []string{"version: format version 2, this binary reads versions [0 1]"}},
		{"no version line", "node.id=1\ndirectory.id=" + dirID + "\nholdfast.format=2\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := storage.NewCrashFS(1)
			fsys.MkdirAll("/d", 0o755)
			fsys.WriteFileForTest("/d/"+FileName, []byte(tc.file))
			id, err := Open(fsys, "/d", 1)
			if got, _ := fsys.ReadFileForTest("/d/" + FileName); string(got) != tc.file {
				t.Fatalf("the file changed: %q", got)
			}
			if tc.want == nil {
				if err != nil || id.NodeID != 1 || id.DirectoryID.String() != dirID {
					t.Fatalf("open: %+v, %v", id, err)
				}
				return
			}
			if !errors.Is(err, storage.ErrUnknownFormat) || errors.Is(err, ErrLegacy) {
				t.Fatalf("open: %v: want ErrUnknownFormat, not ErrLegacy", err)
			}
			for _, w := range append(tc.want, "/d/"+FileName) {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("open: %q does not say %q", err, w)
				}
			}
		})
	}
}
