// Package datadir is a node's identity on disk: which cluster and node a
// data directory belongs to, and which incarnation of that directory it is.
// It lives in meta.properties, Kafka's file with Kafka's names (cluster.id,
// node.id, directory.id, as KIP-853 and KIP-858 use them), plus what only
// Holdfast needs: its on-disk format version and, on the nodes that formed
// the cluster, the directory ids they formed it with.
//
// The directory id is what makes a replaced disk safe. A node whose
// directory is new has lost whatever it had acknowledged before; it must not
// vote in, or count toward the quorum of, any Raft group it belonged to
// until it has caught up again. Its new directory id is how it and the rest
// of the cluster know (see internal/broker/identity.go).
package datadir

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"holdfast/internal/storage"
)

// FileName is the identity file in the data directory (Kafka's name).
const FileName = "meta.properties"

// Format is the on-disk format this version writes and reads. Format 2:
// Raft entries that are not record batches are kept out of the partition
// logs (format 1, never written into meta.properties, stored them as
// control batches that took Kafka offsets).
const Format = 2

// UUID is a Kafka-style id: 16 bytes, printed as URL-safe base64 without
// padding (22 characters).
type UUID [16]byte

func (u UUID) String() string { return base64.RawURLEncoding.EncodeToString(u[:]) }

// IsZero reports whether u is the zero id (unknown, unset).
func (u UUID) IsZero() bool { return u == UUID{} }

// ParseUUID parses the printed form.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 16 {
		return u, fmt.Errorf("datadir: %q is not a 22-character base64url id", s)
	}
	copy(u[:], b)
	return u, nil
}

// NewUUID is a random version-4 id that is not zero, not Kafka's reserved
// ids and does not print with a leading '-' (it would read as a flag).
func NewUUID() UUID {
	for {
		var u UUID
		if _, err := rand.Read(u[:]); err != nil {
			panic(err) // crypto/rand does not fail on supported platforms
		}
		u[6] = u[6]&0x0f | 0x40
		u[8] = u[8]&0x3f | 0x80
		if u.IsZero() || u == (UUID{15: 1}) || u.String()[0] == '-' {
			continue
		}
		return u
	}
}

// Identity is what meta.properties holds.
type Identity struct {
	NodeID      int32
	DirectoryID UUID
	// ClusterID is empty until the node has formed or joined a cluster (a
	// node of a cluster learns it from its peers; a single node makes one).
	ClusterID string
	// Bootstrap maps each metadata voter that formed the cluster to the
	// directory id it formed it with. Empty on a node that joined a cluster
	// that already existed, and on a single node.
	Bootstrap map[int32]UUID
}

// Formatted reports whether the directory belongs to a cluster.
func (id Identity) Formatted() bool { return id.ClusterID != "" }

// BootstrapMember reports whether this directory is one the cluster was
// formed with: only such a directory may vote in the groups it never saw
// without first catching up.
func (id Identity) BootstrapMember() bool {
	d, ok := id.Bootstrap[id.NodeID]
	return ok && d == id.DirectoryID
}

// ErrLegacy: the directory was written by a Holdfast whose cluster logs this
// version cannot read.
var ErrLegacy = errors.New("datadir: data directory of an older, incompatible format")

// Open reads the identity of dir for node nodeID, creating it for an empty
// (or new) directory: a fresh directory id, no cluster yet. A directory of
// another node, or of a format this version does not read, is refused with
// a message that says what to do.
func Open(fsys storage.FS, dir string, nodeID int32) (Identity, error) {
	// A new directory's name must be durable before the identity in it
	// is: a power cut would otherwise drop the directory with the id
	// other nodes may have heard.
	if err := storage.MkdirAllDurable(fsys, dir); err != nil {
		return Identity{}, err
	}
	path := filepath.Join(dir, FileName)
	data, err := readFile(fsys, path)
	switch {
	case err == nil:
		id, format, err := parse(data)
		if err != nil {
			return Identity{}, fmt.Errorf("datadir: %s: %w", path, err)
		}
		if format != Format {
			return Identity{}, fmt.Errorf("datadir: %s: format %d, this version reads %d: %w", path, format, Format, ErrLegacy)
		}
		if id.NodeID != nodeID {
			return Identity{}, fmt.Errorf("datadir: %s belongs to node %d, not %d: start node %d with its own data directory (or an empty one to join as a new replica)", path, id.NodeID, nodeID, nodeID)
		}
		return id, nil
	case !errors.Is(err, os.ErrNotExist):
		return Identity{}, fmt.Errorf("datadir: %w", err)
	}
	// No identity yet: new, or written before identities existed.
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return Identity{}, err
	}
	if slices.Contains(names, "raft-state.journal") {
		return Identity{}, fmt.Errorf("datadir: %s holds a cluster node's data in the format of Holdfast before Kafka-exact offsets, which this version cannot read (its partition logs hold Raft entries at Kafka offsets): %w; start this node with an empty data directory to have it copy its replicas from the other nodes, or recreate the cluster", dir, ErrLegacy)
	}
	id := Identity{NodeID: nodeID, DirectoryID: NewUUID()}
	if err := Write(fsys, dir, id); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// Write replaces meta.properties atomically (temp file, fsync, rename,
// fsync of the directory).
func Write(fsys storage.FS, dir string, id Identity) error {
	var b bytes.Buffer
	b.WriteString("# Holdfast node identity. Do not edit: a changed directory.id makes the\n# cluster treat this node as a replaced disk.\n")
	fmt.Fprintf(&b, "version=1\nnode.id=%d\ndirectory.id=%s\nholdfast.format=%d\n", id.NodeID, id.DirectoryID, Format)
	if id.ClusterID != "" {
		fmt.Fprintf(&b, "cluster.id=%s\n", id.ClusterID)
	}
	if len(id.Bootstrap) > 0 {
		fmt.Fprintf(&b, "holdfast.bootstrap.voters=%s\n", FormatVoters(id.Bootstrap))
	}
	if _, err := storage.WriteFileAtomic(fsys, filepath.Join(dir, FileName), b.Bytes()); err != nil {
		return fmt.Errorf("datadir: writing %s: %w", FileName, err)
	}
	return nil
}

// FormatVoters prints voters as "1:<dir>,2:<dir>", by node id.
func FormatVoters(v map[int32]UUID) string {
	ids := make([]int32, 0, len(v))
	for id := range v {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%d:%s", id, v[id])
	}
	return strings.Join(parts, ",")
}

func parseVoters(s string) (map[int32]UUID, error) {
	out := map[int32]UUID{}
	for p := range strings.SplitSeq(s, ",") {
		idStr, dirStr, ok := strings.Cut(strings.TrimSpace(p), ":")
		if !ok {
			return nil, fmt.Errorf("bootstrap voter %q: want id:directory", p)
		}
		id, err := strconv.ParseInt(idStr, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("bootstrap voter %q: %w", p, err)
		}
		d, err := ParseUUID(dirStr)
		if err != nil {
			return nil, err
		}
		out[int32(id)] = d
	}
	return out, nil
}

func parse(data []byte) (id Identity, format int, err error) {
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return id, 0, fmt.Errorf("line %q: want key=value", line)
		}
		kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if err := sc.Err(); err != nil {
		return id, 0, err
	}
	// The versions first: a newer file may lay out the rest differently.
	// holdfast.format is this file's and the data directory's; version is
	// Kafka's meta.properties version (Holdfast writes 1).
	if f, err := strconv.ParseInt(kv["holdfast.format"], 10, 64); err == nil {
		if err := storage.CheckVersion("holdfast.format", f, Format); err != nil {
			return id, 0, err
		}
	}
	if v, err := strconv.ParseInt(kv["version"], 10, 64); err == nil {
		if err := storage.CheckVersion("version", v, 0, 1); err != nil {
			return id, 0, err
		}
	}
	n, err := strconv.ParseInt(kv["node.id"], 10, 32)
	if err != nil {
		return id, 0, fmt.Errorf("node.id %q: %w", kv["node.id"], err)
	}
	id.NodeID = int32(n)
	if id.DirectoryID, err = ParseUUID(kv["directory.id"]); err != nil {
		return id, 0, fmt.Errorf("directory.id: %w", err)
	}
	id.ClusterID = kv["cluster.id"]
	if v := kv["holdfast.bootstrap.voters"]; v != "" {
		if id.Bootstrap, err = parseVoters(v); err != nil {
			return id, 0, err
		}
	}
	format, err = strconv.Atoi(kv["holdfast.format"])
	if err != nil {
		return id, 0, fmt.Errorf("holdfast.format %q: %w", kv["holdfast.format"], err)
	}
	return id, format, nil
}

func readFile(fsys storage.FS, path string) ([]byte, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if size > 1<<20 {
		return nil, fmt.Errorf("%s is %d bytes: not an identity file", path, size)
	}
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf, nil
}

// ClusterIDFor is the id of the cluster that the bootstrap voters form: a
// hash of their node and directory ids, so that every node that formats
// from the same voters arrives at the same id with no one choosing it.
func ClusterIDFor(bootstrap map[int32]UUID) string {
	h := sha256.New()
	h.Write([]byte("holdfast cluster\x00"))
	h.Write([]byte(FormatVoters(bootstrap)))
	var u UUID
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	if u.String()[0] == '-' {
		u[0] ^= 0x80 // keep it from reading as a flag
	}
	return u.String()
}

// Peer is what another node says of its own identity.
type Peer struct {
	ClusterID   string // "" if it has not formed or joined a cluster
	DirectoryID UUID
	Bootstrap   map[int32]UUID
}

// Join decides the cluster of a node whose directory is not formatted yet,
// from what the metadata voters (voters: every node id in --peers) said of
// themselves. It returns the identity to write and true once decided:
//   - a peer belongs to a cluster: the node joins it, as a bootstrap member
//     if that cluster was formed with this very directory (it crashed
//     before writing the id down), otherwise as a new directory — a
//     replaced disk or a new node — that must catch up before it votes;
//   - every voter is heard and none has a cluster: they form one, with the
//     id their directories determine (ClusterIDFor), without a leader.
//
// Otherwise it waits (false) and why says for what. A node can never form
// a cluster on its own while another voter is silent: that voter may hold
// the cluster this node's old disk belonged to.
func Join(self Identity, voters []int32, heard map[int32]Peer) (out Identity, ok bool, why string) {
	ids := make([]int32, 0, len(heard))
	for id := range heard {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var cluster string
	var from int32
	for _, id := range ids {
		p := heard[id]
		if p.ClusterID == "" {
			continue
		}
		if cluster != "" && p.ClusterID != cluster {
			return self, false, fmt.Sprintf("peers disagree on the cluster: node %d is in %s, node %d in %s", from, cluster, id, p.ClusterID)
		}
		cluster, from = p.ClusterID, id
	}
	if cluster != "" {
		out = self
		out.ClusterID, out.Bootstrap = cluster, nil
		if d, ok := heard[from].Bootstrap[self.NodeID]; ok && d == self.DirectoryID {
			out.Bootstrap = heard[from].Bootstrap
		}
		return out, true, ""
	}
	if !slices.Contains(voters, self.NodeID) {
		return self, false, "no controller node has a cluster yet"
	}
	boot := map[int32]UUID{self.NodeID: self.DirectoryID}
	var missing []string
	for _, v := range voters {
		if v == self.NodeID {
			continue
		}
		p, ok := heard[v]
		if !ok || p.DirectoryID.IsZero() {
			missing = append(missing, strconv.Itoa(int(v)))
			continue
		}
		boot[v] = p.DirectoryID
	}
	if len(missing) > 0 {
		return self, false, "not heard from node(s) " + strings.Join(missing, ", ") + " of --peers: a new cluster forms only when every node of --peers is up with an empty data directory, and a replaced node joins once a node that has the cluster answers"
	}
	out = self
	out.ClusterID, out.Bootstrap = ClusterIDFor(boot), boot
	return out, true, ""
}
