package metadata

import (
	"path/filepath"
	"testing"

	"holdfast/internal/auth"
	"holdfast/internal/storage"
)

func TestSecurityCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	s, err := Open(dir, storage.OSFS(), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	a := auth.ACL{ResourceType: auth.ResourceTopic, ResourceName: "t", PatternType: auth.PatternLiteral, Principal: "User:alice", Host: "*", Operation: auth.OpRead, Permission: auth.PermAllow}
	b := a
	b.Operation = auth.OpWrite
	if err := s.Do(Command{Op: OpCreateACLs, ACLs: []auth.ACL{b, a, a}}); err != nil {
		t.Fatal(err)
	}
	if got := s.ACLs(); len(got) != 2 || got[0] != a {
		t.Fatalf("ACLs %v", got)
	}
	bad := a
	bad.PatternType = auth.PatternMatch
	if err := s.Do(Command{Op: OpCreateACLs, ACLs: []auth.ACL{bad}}); err == nil {
		t.Fatal("an invalid ACL was stored")
	}
	cred, err := auth.NewScramCredential("alice", auth.MechScramSHA512, "pw", 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Do(Command{Op: OpScram, Scram: []auth.ScramCredential{cred}}); err != nil {
		t.Fatal(err)
	}
	// Everything survives a restart (the metadata file).
	closeStore(t, s)
	s2, err := Open(dir, storage.OSFS(), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s2.ScramCredential("alice", auth.MechScramSHA512); !ok || !got.VerifyPassword("pw") {
		t.Fatal("SCRAM credential lost across reopen")
	}
	if len(s2.ACLs()) != 2 {
		t.Fatal("ACLs lost across reopen")
	}
	if err := s2.Do(Command{Op: OpDeleteACLs, ACLs: []auth.ACL{a}}); err != nil {
		t.Fatal(err)
	}
	if err := s2.Do(Command{Op: OpScram, ScramDeletions: []ScramKey{{"alice", auth.MechScramSHA512}}}); err != nil {
		t.Fatal(err)
	}
	if got := s2.ACLs(); len(got) != 1 || got[0] != b {
		t.Fatalf("after delete: %v", got)
	}
	if _, ok := s2.ScramCredential("alice", auth.MechScramSHA512); ok {
		t.Fatal("deleted credential still there")
	}
	// In a cluster the same commands apply through the log.
	if _, err := s2.Apply(s2.Applied()+1, Command{Op: OpCreateACLs, ACLs: []auth.ACL{a}}); err != nil {
		t.Fatal(err)
	}
	if len(s2.ACLs()) != 2 {
		t.Fatal("Apply did not add the ACL")
	}
}
