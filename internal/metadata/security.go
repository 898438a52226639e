package metadata

import (
	"fmt"
	"slices"
	"sort"

	"holdfast/internal/auth"
)

// Security metadata: ACLs and SCRAM credentials live in the metadata (the
// metadata log in a cluster), so every node authorizes and authenticates
// from the same committed state.

// Security commands.
const (
	OpCreateACLs = "create_acls" // Command.ACLs: added (duplicates ignored)
	OpDeleteACLs = "delete_acls" // Command.ACLs: removed (absent ones ignored)
	// OpScram upserts Command.Scram and deletes Command.ScramDeletions.
	OpScram = "scram"
)

// ScramKey names one SCRAM credential.
type ScramKey struct {
	User      string `json:"user"`
	Mechanism string `json:"mechanism"`
}

// ACLs returns every ACL.
func (s *Store) ACLs() []auth.ACL {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.img.st.ACLs)
}

// ScramCredential returns a user's credential for a mechanism
// (auth.CredentialStore).
func (s *Store) ScramCredential(user, mechanism string) (auth.ScramCredential, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, c := range s.img.st.Scram {
		if c.User == user && c.Mechanism == mechanism {
			return c, true
		}
	}
	return auth.ScramCredential{}, false
}

// ScramCredentials returns every SCRAM credential, by user then mechanism.
func (s *Store) ScramCredentials() []auth.ScramCredential {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.img.st.Scram)
}

// Do applies a command to a single node's metadata (no log: the change is
// persisted at once, in a snapshot). The cluster applies commands through
// Apply.
func (s *Store) Do(c Command) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next, _, err := s.img.Apply(s.img.st.Applied, c)
	if err != nil {
		return err
	}
	prev := s.img
	s.setImage(next)
	if err := s.snapshotNowLocked(); err != nil {
		s.setImage(prev)
		return err
	}
	return nil
}

// Limits on security metadata, so a client cannot grow it without bound.
const (
	MaxACLs             = 100000
	MaxScramCredentials = 100000
)

// applySecurity applies the security commands; handled is false for other
// commands.
func applySecurity(next *state, c Command) (handled bool, err error) {
	switch c.Op {
	case OpCreateACLs:
		acls := slices.Clone(next.ACLs)
		for _, a := range c.ACLs {
			if err := a.Validate(); err != nil {
				return true, err
			}
			if !slices.Contains(acls, a) {
				acls = append(acls, a)
			}
		}
		if len(acls) > MaxACLs {
			return true, fmt.Errorf("metadata: more than %d ACLs", MaxACLs)
		}
		sortACLs(acls)
		next.ACLs = acls
	case OpDeleteACLs:
		next.ACLs = slices.DeleteFunc(slices.Clone(next.ACLs), func(a auth.ACL) bool { return slices.Contains(c.ACLs, a) })
	case OpScram:
		creds := slices.DeleteFunc(slices.Clone(next.Scram), func(x auth.ScramCredential) bool {
			k := ScramKey{x.User, x.Mechanism}
			if slices.Contains(c.ScramDeletions, k) {
				return true
			}
			return slices.ContainsFunc(c.Scram, func(u auth.ScramCredential) bool { return u.User == x.User && u.Mechanism == x.Mechanism })
		})
		for _, u := range c.Scram {
			if u.User == "" || auth.ScramMechanismCode(u.Mechanism) == 0 || len(u.StoredKey) == 0 || len(u.ServerKey) == 0 {
				return true, fmt.Errorf("metadata: bad SCRAM credential for %q", u.User)
			}
			creds = append(creds, u)
		}
		if len(creds) > MaxScramCredentials {
			return true, fmt.Errorf("metadata: more than %d SCRAM credentials", MaxScramCredentials)
		}
		sort.Slice(creds, func(i, j int) bool {
			if creds[i].User != creds[j].User {
				return creds[i].User < creds[j].User
			}
			return creds[i].Mechanism < creds[j].Mechanism
		})
		next.Scram = creds
	default:
		return false, nil
	}
	return true, nil
}

func sortACLs(acls []auth.ACL) {
	sort.SliceStable(acls, func(i, j int) bool {
		a, b := acls[i], acls[j]
		switch {
		case a.ResourceType != b.ResourceType:
			return a.ResourceType < b.ResourceType
		case a.ResourceName != b.ResourceName:
			return a.ResourceName < b.ResourceName
		case a.PatternType != b.PatternType:
			return a.PatternType < b.PatternType
		case a.Principal != b.Principal:
			return a.Principal < b.Principal
		case a.Host != b.Host:
			return a.Host < b.Host
		case a.Operation != b.Operation:
			return a.Operation < b.Operation
		}
		return a.Permission < b.Permission
	})
}
