package auth

import (
	"errors"
	"fmt"
	"strings"
)

// The ACL enums carry Kafka's wire codes (CreateAcls, DescribeAcls), so
// requests convert without a table.

// ResourceType is what an ACL protects.
type ResourceType int8

const (
	ResourceUnknown         ResourceType = 0
	ResourceAny             ResourceType = 1 // filters only
	ResourceTopic           ResourceType = 2
	ResourceGroup           ResourceType = 3
	ResourceCluster         ResourceType = 4
	ResourceTransactionalID ResourceType = 5
	ResourceDelegationToken ResourceType = 6
	ResourceUser            ResourceType = 7
)

// ClusterName is the one name of the cluster resource.
const ClusterName = "kafka-cluster"

func (r ResourceType) String() string {
	switch r {
	case ResourceAny:
		return "ANY"
	case ResourceTopic:
		return "TOPIC"
	case ResourceGroup:
		return "GROUP"
	case ResourceCluster:
		return "CLUSTER"
	case ResourceTransactionalID:
		return "TRANSACTIONAL_ID"
	case ResourceDelegationToken:
		return "DELEGATION_TOKEN"
	case ResourceUser:
		return "USER"
	}
	return "UNKNOWN"
}

// PatternType is how an ACL's resource name matches.
type PatternType int8

const (
	PatternUnknown  PatternType = 0
	PatternAny      PatternType = 1 // filters: literal or prefixed, name compared as is
	PatternMatch    PatternType = 2 // filters: every ACL that applies to the name
	PatternLiteral  PatternType = 3 // the name, or "*" for every name
	PatternPrefixed PatternType = 4 // every name starting with it
)

func (p PatternType) String() string {
	switch p {
	case PatternAny:
		return "ANY"
	case PatternMatch:
		return "MATCH"
	case PatternLiteral:
		return "LITERAL"
	case PatternPrefixed:
		return "PREFIXED"
	}
	return "UNKNOWN"
}

// Operation is what a principal does to a resource.
type Operation int8

const (
	OpUnknown         Operation = 0
	OpAny             Operation = 1 // filters only
	OpAll             Operation = 2
	OpRead            Operation = 3
	OpWrite           Operation = 4
	OpCreate          Operation = 5
	OpDelete          Operation = 6
	OpAlter           Operation = 7
	OpDescribe        Operation = 8
	OpClusterAction   Operation = 9
	OpDescribeConfigs Operation = 10
	OpAlterConfigs    Operation = 11
	OpIdempotentWrite Operation = 12
	OpCreateTokens    Operation = 13
	OpDescribeTokens  Operation = 14
)

var opNames = map[Operation]string{
	OpAny: "ANY", OpAll: "ALL", OpRead: "READ", OpWrite: "WRITE", OpCreate: "CREATE", OpDelete: "DELETE",
	OpAlter: "ALTER", OpDescribe: "DESCRIBE", OpClusterAction: "CLUSTER_ACTION", OpDescribeConfigs: "DESCRIBE_CONFIGS",
	OpAlterConfigs: "ALTER_CONFIGS", OpIdempotentWrite: "IDEMPOTENT_WRITE", OpCreateTokens: "CREATE_TOKENS",
	OpDescribeTokens: "DESCRIBE_TOKENS",
}

func (o Operation) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return "UNKNOWN"
}

// Permission allows or denies.
type Permission int8

const (
	PermUnknown Permission = 0
	PermAny     Permission = 1 // filters only
	PermDeny    Permission = 2
	PermAllow   Permission = 3
)

func (p Permission) String() string {
	switch p {
	case PermAny:
		return "ANY"
	case PermDeny:
		return "DENY"
	case PermAllow:
		return "ALLOW"
	}
	return "UNKNOWN"
}

// Operations lists the operations that mean something for each resource
// type, as Kafka's authorized-operations bitfields (KIP-430) report them.
var Operations = map[ResourceType][]Operation{
	ResourceTopic:           {OpRead, OpWrite, OpCreate, OpDelete, OpAlter, OpDescribe, OpDescribeConfigs, OpAlterConfigs},
	ResourceGroup:           {OpRead, OpDelete, OpDescribe},
	ResourceCluster:         {OpCreate, OpAlter, OpDescribe, OpClusterAction, OpDescribeConfigs, OpAlterConfigs, OpIdempotentWrite},
	ResourceTransactionalID: {OpWrite, OpDescribe},
	ResourceDelegationToken: {OpDescribe},
	ResourceUser:            {OpCreateTokens, OpDescribeTokens},
}

// ACL is one access control entry bound to a resource pattern (Kafka's
// AclBinding). Field names are part of the metadata log's format.
type ACL struct {
	ResourceType ResourceType `json:"resource_type"`
	ResourceName string       `json:"resource_name"`
	PatternType  PatternType  `json:"pattern_type"`
	Principal    string       `json:"principal"` // "User:alice", or "User:*" for every user
	Host         string       `json:"host"`      // a client IP, or "*"
	Operation    Operation    `json:"operation"`
	Permission   Permission   `json:"permission"`
}

func (a ACL) String() string {
	return fmt.Sprintf("(principal=%s, host=%s, operation=%s, permissionType=%s) on %s:%s:%s",
		a.Principal, a.Host, a.Operation, a.Permission, a.ResourceType, a.PatternType, a.ResourceName)
}

// ErrInvalidACL is wrapped by Validate's errors (Kafka: INVALID_REQUEST).
var ErrInvalidACL = errors.New("invalid ACL")

// Validate checks a binding that is to be created, as Kafka's controller
// does: concrete enums (no ANY/MATCH/UNKNOWN), a parseable principal, a
// host, and the cluster resource named kafka-cluster.
func (a ACL) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidACL, fmt.Sprintf(format, args...))
	}
	switch {
	case a.ResourceType <= ResourceAny || a.ResourceType > ResourceUser:
		return bad("resource type %s", a.ResourceType)
	case a.PatternType != PatternLiteral && a.PatternType != PatternPrefixed:
		return bad("pattern type %s: want LITERAL or PREFIXED", a.PatternType)
	case a.Operation <= OpAny || a.Operation > OpDescribeTokens:
		return bad("operation %s", a.Operation)
	case a.Permission != PermAllow && a.Permission != PermDeny:
		return bad("permission type %s: want ALLOW or DENY", a.Permission)
	case a.ResourceName == "":
		return bad("empty resource name")
	case a.Host == "":
		return bad("empty host (use * for every host)")
	case a.ResourceType == ResourceCluster && a.ResourceName != ClusterName:
		return bad("the cluster resource is named %s, not %q", ClusterName, a.ResourceName)
	case a.PatternType == PatternPrefixed && a.ResourceName == "*":
		return bad("a prefixed pattern cannot be the wildcard *")
	}
	if _, err := ParsePrincipal(a.Principal); err != nil {
		return bad("%v", err)
	}
	return nil
}

// Filter selects ACLs (DescribeAcls, DeleteAcls). A nil string matches
// every value; ANY matches every enum value.
type Filter struct {
	ResourceType ResourceType
	ResourceName *string
	PatternType  PatternType
	Principal    *string
	Host         *string
	Operation    Operation
	Permission   Permission
}

// ValidateFilter refuses filters Kafka refuses: UNKNOWN enums.
func (f Filter) Validate() error {
	switch {
	case f.ResourceType == ResourceUnknown || f.ResourceType > ResourceUser:
		return fmt.Errorf("%w: filter resource type %s", ErrInvalidACL, f.ResourceType)
	case f.PatternType == PatternUnknown || f.PatternType > PatternPrefixed:
		return fmt.Errorf("%w: filter pattern type %s", ErrInvalidACL, f.PatternType)
	case f.Operation == OpUnknown || f.Operation > OpDescribeTokens:
		return fmt.Errorf("%w: filter operation %s", ErrInvalidACL, f.Operation)
	case f.Permission == PermUnknown || f.Permission > PermAllow:
		return fmt.Errorf("%w: filter permission type %s", ErrInvalidACL, f.Permission)
	}
	return nil
}

// Matches reports whether the filter selects a.
func (f Filter) Matches(a ACL) bool {
	if f.ResourceType != ResourceAny && f.ResourceType != a.ResourceType {
		return false
	}
	if !f.matchesPattern(a) {
		return false
	}
	if f.Principal != nil && *f.Principal != a.Principal {
		return false
	}
	if f.Host != nil && *f.Host != a.Host {
		return false
	}
	if f.Operation != OpAny && f.Operation != a.Operation {
		return false
	}
	if f.Permission != PermAny && f.Permission != a.Permission {
		return false
	}
	return true
}

func (f Filter) matchesPattern(a ACL) bool {
	switch f.PatternType {
	case PatternAny:
		return f.ResourceName == nil || *f.ResourceName == a.ResourceName
	case PatternMatch:
		// Every ACL that would apply to a resource of this name.
		if f.ResourceName == nil {
			return true
		}
		return appliesTo(a, *f.ResourceName)
	default:
		return f.PatternType == a.PatternType && (f.ResourceName == nil || *f.ResourceName == a.ResourceName)
	}
}

// appliesTo reports whether a's pattern covers the resource name.
func appliesTo(a ACL, name string) bool {
	switch a.PatternType {
	case PatternLiteral:
		return a.ResourceName == name || a.ResourceName == "*"
	case PatternPrefixed:
		return strings.HasPrefix(name, a.ResourceName)
	}
	return false
}
