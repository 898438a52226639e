package auth

import (
	"slices"
	"strings"
	"sync/atomic"
)

// Authorizer decides whether a principal may perform an operation on a
// resource, with the semantics of Kafka's StandardAuthorizer:
//
//   - a super user may do everything;
//   - the ACLs that apply to a resource are its literal ACLs, the literal
//     "*" ACLs of its type and the prefixed ACLs whose prefix it starts
//     with; of those, the ones whose principal (or User:*) and host (or *)
//     match the request count;
//   - a DENY for the operation (or ALL) wins over any ALLOW;
//   - an ALLOW for the operation, for ALL, or for an operation that implies
//     it allows: READ, WRITE, DELETE and ALTER imply DESCRIBE, and
//     ALTER_CONFIGS implies DESCRIBE_CONFIGS (implication never widens a
//     DENY);
//   - when no ACL at all applies to the resource, the answer is
//     allow.everyone.if.no.acl.found (default false).
//
// The ACL set is replaced whole (SetACLs) by whoever applies the metadata
// log, so every node answers from the same committed ACLs; Authorize never
// blocks.
type Authorizer struct {
	superUsers   []Principal
	allowIfNoACL bool
	idx          atomic.Pointer[aclIndex]
}

// NewAuthorizer returns an authorizer with no ACLs.
func NewAuthorizer(superUsers []Principal, allowEveryoneIfNoACL bool) *Authorizer {
	a := &Authorizer{superUsers: slices.Clone(superUsers), allowIfNoACL: allowEveryoneIfNoACL}
	a.idx.Store(newIndex(nil))
	return a
}

// SetACLs replaces the ACLs the authorizer answers from.
func (a *Authorizer) SetACLs(acls []ACL) { a.idx.Store(newIndex(acls)) }

// ACLs returns the current ACLs.
func (a *Authorizer) ACLs() []ACL { return slices.Clone(a.idx.Load().all) }

// IsSuperUser reports whether p is in super.users.
func (a *Authorizer) IsSuperUser(p Principal) bool { return slices.Contains(a.superUsers, p) }

// Authorize reports whether principal p, connected from host (an IP
// address), may perform op on the resource (typ, name).
func (a *Authorizer) Authorize(p Principal, host string, op Operation, typ ResourceType, name string) bool {
	if a.IsSuperUser(p) {
		return true
	}
	idx := a.idx.Load()
	any, allowed := false, false
	principal, wildcard := p.String(), p.Type+":*"
	check := func(acl *ACL) bool { // true: denied
		any = true
		if acl.Principal != principal && acl.Principal != wildcard {
			return false
		}
		if acl.Host != "*" && acl.Host != host {
			return false
		}
		switch acl.Permission {
		case PermDeny:
			return acl.Operation == op || acl.Operation == OpAll
		case PermAllow:
			if acl.Operation == op || acl.Operation == OpAll || implies(acl.Operation, op) {
				allowed = true
			}
		}
		return false
	}
	byType := idx.types[typ]
	if byType == nil {
		return a.allowIfNoACL
	}
	for _, acl := range byType.literal[name] {
		if check(acl) {
			return false
		}
	}
	if name != "*" {
		for _, acl := range byType.literal["*"] {
			if check(acl) {
				return false
			}
		}
	}
	for _, acl := range byType.prefixed {
		if strings.HasPrefix(name, acl.ResourceName) && check(acl) {
			return false
		}
	}
	if !any {
		return a.allowIfNoACL
	}
	return allowed
}

// AuthorizedOperations is the KIP-430 bitfield of the operations p may
// perform on the resource (bit n set: operation code n allowed).
func (a *Authorizer) AuthorizedOperations(p Principal, host string, typ ResourceType, name string) int32 {
	var bits int32
	for _, op := range Operations[typ] {
		if a.Authorize(p, host, op, typ, name) {
			bits |= 1 << op
		}
	}
	return bits
}

// implies reports whether an ALLOW for have also allows want.
func implies(have, want Operation) bool {
	switch want {
	case OpDescribe:
		return have == OpRead || have == OpWrite || have == OpDelete || have == OpAlter
	case OpDescribeConfigs:
		return have == OpAlterConfigs
	}
	return false
}

// aclIndex is an immutable lookup structure over one ACL set.
type aclIndex struct {
	all   []ACL
	types map[ResourceType]*typeIndex
}

type typeIndex struct {
	literal  map[string][]*ACL
	prefixed []*ACL
}

func newIndex(acls []ACL) *aclIndex {
	idx := &aclIndex{all: slices.Clone(acls), types: map[ResourceType]*typeIndex{}}
	for i := range idx.all {
		acl := &idx.all[i]
		ti := idx.types[acl.ResourceType]
		if ti == nil {
			ti = &typeIndex{literal: map[string][]*ACL{}}
			idx.types[acl.ResourceType] = ti
		}
		switch acl.PatternType {
		case PatternLiteral:
			ti.literal[acl.ResourceName] = append(ti.literal[acl.ResourceName], acl)
		case PatternPrefixed:
			ti.prefixed = append(ti.prefixed, acl)
		}
	}
	return idx
}

// AuthorizeAny reports whether p may perform op on at least one resource
// of the type (Kafka's authorizeByResourceType: an idempotent producer
// needs WRITE on some topic): some ALLOW for it that no wildcard DENY
// cancels, or - without any ACL of the type - allow.everyone.if.no.acl.found.
func (a *Authorizer) AuthorizeAny(p Principal, host string, op Operation, typ ResourceType) bool {
	if a.IsSuperUser(p) {
		return true
	}
	ti := a.idx.Load().types[typ]
	if ti == nil {
		return a.allowIfNoACL
	}
	principal, wildcard := p.String(), p.Type+":*"
	applies := func(acl *ACL) bool {
		return (acl.Principal == principal || acl.Principal == wildcard) && (acl.Host == "*" || acl.Host == host) &&
			(acl.Operation == op || acl.Operation == OpAll)
	}
	for _, acl := range ti.literal["*"] {
		if acl.Permission == PermDeny && applies(acl) {
			return false
		}
	}
	denied := func(name string) bool {
		return !a.Authorize(p, host, op, typ, name)
	}
	for _, acls := range ti.literal {
		for _, acl := range acls {
			if acl.Permission == PermAllow && applies(acl) && (acl.ResourceName == "*" || !denied(acl.ResourceName)) {
				return true
			}
		}
	}
	for _, acl := range ti.prefixed {
		if acl.Permission == PermAllow && applies(acl) && !denied(acl.ResourceName) {
			return true
		}
	}
	return false
}
