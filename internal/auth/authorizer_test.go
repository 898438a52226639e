package auth

import (
	"testing"
)

func allow(typ ResourceType, name string, pt PatternType, principal, host string, op Operation) ACL {
	return ACL{ResourceType: typ, ResourceName: name, PatternType: pt, Principal: principal, Host: host, Operation: op, Permission: PermAllow}
}

func deny(typ ResourceType, name string, pt PatternType, principal, host string, op Operation) ACL {
	a := allow(typ, name, pt, principal, host, op)
	a.Permission = PermDeny
	return a
}

func TestAuthorizer(t *testing.T) {
	alice, bob, admin := User("alice"), User("bob"), User("admin")
	acls := []ACL{
		allow(ResourceTopic, "orders", PatternLiteral, "User:alice", "*", OpWrite),
		allow(ResourceTopic, "logs-", PatternPrefixed, "User:alice", "*", OpRead),
		deny(ResourceTopic, "logs-secret", PatternLiteral, "User:alice", "*", OpRead),
		allow(ResourceTopic, "*", PatternLiteral, "User:bob", "10.0.0.1", OpAll),
		deny(ResourceTopic, "*", PatternLiteral, "User:*", "10.0.0.66", OpAll),
		allow(ResourceGroup, "g", PatternLiteral, "User:alice", "*", OpRead),
		allow(ResourceTopic, "cfg", PatternLiteral, "User:alice", "*", OpAlterConfigs),
		deny(ResourceTopic, "denied-describe", PatternLiteral, "User:alice", "*", OpRead),
		allow(ResourceTopic, "denied-describe", PatternLiteral, "User:alice", "*", OpDescribe),
	}
	cases := []struct {
		name string
		p    Principal
		host string
		op   Operation
		typ  ResourceType
		res  string
		want bool
	}{
		{"literal write", alice, "1.2.3.4", OpWrite, ResourceTopic, "orders", true},
		{"write implies describe", alice, "1.2.3.4", OpDescribe, ResourceTopic, "orders", true},
		{"write does not imply read", alice, "1.2.3.4", OpRead, ResourceTopic, "orders", false},
		{"prefixed read", alice, "1.2.3.4", OpRead, ResourceTopic, "logs-app", true},
		{"deny wins over prefixed allow", alice, "1.2.3.4", OpRead, ResourceTopic, "logs-secret", false},
		{"deny read does not deny describe", alice, "1.2.3.4", OpDescribe, ResourceTopic, "logs-secret", true},
		{"explicit describe survives a read deny", alice, "1.2.3.4", OpDescribe, ResourceTopic, "denied-describe", true},
		{"other user, no match", bob, "1.2.3.4", OpRead, ResourceTopic, "orders", false},
		{"host-bound wildcard allow", bob, "10.0.0.1", OpRead, ResourceTopic, "orders", true},
		{"host-bound wildcard, other host", bob, "10.0.0.2", OpRead, ResourceTopic, "orders", false},
		{"User:* deny by host", alice, "10.0.0.66", OpWrite, ResourceTopic, "orders", false},
		{"group read", alice, "1.2.3.4", OpRead, ResourceGroup, "g", true},
		{"group describe implied", alice, "1.2.3.4", OpDescribe, ResourceGroup, "g", true},
		{"group delete not implied", alice, "1.2.3.4", OpDelete, ResourceGroup, "g", false},
		{"no ACLs for the type: default deny", alice, "1.2.3.4", OpWrite, ResourceTransactionalID, "tx", false},
		{"alter configs implies describe configs", alice, "1.2.3.4", OpDescribeConfigs, ResourceTopic, "cfg", true},
		{"super user", admin, "10.0.0.66", OpClusterAction, ResourceCluster, ClusterName, true},
	}
	a := NewAuthorizer([]Principal{admin}, false)
	a.SetACLs(acls)
	for _, c := range cases {
		if got := a.Authorize(c.p, c.host, c.op, c.typ, c.res); got != c.want {
			t.Errorf("%s: Authorize(%s, %s, %s, %s:%s) = %v, want %v", c.name, c.p, c.host, c.op, c.typ, c.res, got, c.want)
		}
	}
}

func TestAuthorizerAllowEveryoneIfNoACL(t *testing.T) {
	a := NewAuthorizer(nil, true)
	a.SetACLs([]ACL{allow(ResourceTopic, "owned", PatternLiteral, "User:alice", "*", OpRead)})
	if !a.Authorize(User("bob"), "h", OpWrite, ResourceTopic, "free") {
		t.Error("a topic without ACLs must be open with allow.everyone.if.no.acl.found")
	}
	if a.Authorize(User("bob"), "h", OpRead, ResourceTopic, "owned") {
		t.Error("a topic with an ACL is closed to others even with allow.everyone.if.no.acl.found")
	}
	if !a.Authorize(User("bob"), "h", OpCreate, ResourceCluster, ClusterName) {
		t.Error("the cluster has no ACLs: open")
	}
}

func TestAuthorizedOperations(t *testing.T) {
	a := NewAuthorizer(nil, false)
	a.SetACLs([]ACL{allow(ResourceTopic, "t", PatternLiteral, "User:alice", "*", OpRead)})
	got := a.AuthorizedOperations(User("alice"), "h", ResourceTopic, "t")
	if want := int32(1<<OpRead | 1<<OpDescribe); got != want {
		t.Errorf("bits %b, want %b", got, want)
	}
}

func TestFilter(t *testing.T) {
	acls := []ACL{
		allow(ResourceTopic, "a", PatternLiteral, "User:alice", "*", OpRead),
		allow(ResourceTopic, "*", PatternLiteral, "User:alice", "*", OpRead),
		allow(ResourceTopic, "a-", PatternPrefixed, "User:alice", "*", OpRead),
		allow(ResourceGroup, "a", PatternLiteral, "User:bob", "*", OpRead),
	}
	str := func(s string) *string { return &s }
	count := func(f Filter) int {
		n := 0
		for _, a := range acls {
			if f.Matches(a) {
				n++
			}
		}
		return n
	}
	cases := []struct {
		f    Filter
		want int
	}{
		{Filter{ResourceType: ResourceAny, PatternType: PatternAny, Operation: OpAny, Permission: PermAny}, 4},
		{Filter{ResourceType: ResourceTopic, ResourceName: str("a-x"), PatternType: PatternMatch, Operation: OpAny, Permission: PermAny}, 2},
		{Filter{ResourceType: ResourceTopic, ResourceName: str("a"), PatternType: PatternMatch, Operation: OpAny, Permission: PermAny}, 2},
		{Filter{ResourceType: ResourceAny, ResourceName: str("a"), PatternType: PatternAny, Operation: OpAny, Permission: PermAny}, 2},
		{Filter{ResourceType: ResourceTopic, PatternType: PatternPrefixed, Operation: OpAny, Permission: PermAny}, 1},
		{Filter{ResourceType: ResourceAny, PatternType: PatternAny, Principal: str("User:bob"), Operation: OpAny, Permission: PermAny}, 1},
		{Filter{ResourceType: ResourceAny, PatternType: PatternAny, Operation: OpWrite, Permission: PermAny}, 0},
	}
	for i, c := range cases {
		if got := count(c.f); got != c.want {
			t.Errorf("case %d: %d matches, want %d", i, got, c.want)
		}
	}
}

func TestACLValidate(t *testing.T) {
	ok := allow(ResourceTopic, "t", PatternLiteral, "User:alice", "*", OpRead)
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []ACL{
		allow(ResourceAny, "t", PatternLiteral, "User:alice", "*", OpRead),
		allow(ResourceTopic, "t", PatternMatch, "User:alice", "*", OpRead),
		allow(ResourceTopic, "t", PatternLiteral, "alice", "*", OpRead),
		allow(ResourceTopic, "t", PatternLiteral, "User:alice", "*", OpAny),
		allow(ResourceCluster, "other", PatternLiteral, "User:alice", "*", OpAlter),
		allow(ResourceTopic, "", PatternLiteral, "User:alice", "*", OpRead),
		allow(ResourceTopic, "t", PatternLiteral, "User:alice", "", OpRead),
	}
	for _, a := range bad {
		if a.Validate() == nil {
			t.Errorf("%v: accepted", a)
		}
	}
}

func TestMappingRules(t *testing.T) {
	cases := []struct {
		rules, dn, want string
		fail            bool
	}{
		{"", "CN=alice,O=Example", "CN=alice,O=Example", false},
		{"DEFAULT", "CN=alice,O=Example", "CN=alice,O=Example", false},
		{`RULE:^CN=(.*?),O=(.*?)$/$1@$2/L,DEFAULT`, "CN=Alice,O=Example", "alice@example", false},
		{`RULE:^CN=(.*?),O=(.*?)$/$1/U`, "CN=alice,O=Example", "ALICE", false},
		{`RULE:^CN=([^,]*)$/$1/`, "CN=alice,O=Example", "", true},
		{`RULE:^CN=([^,]*).*$/$1/, DEFAULT`, "CN=node-1,O=x", "node-1", false},
		{`RULE:^OU=(.*)$/ou-$1/,RULE:^CN=(.*?),.*$/$1/`, "CN=bob,OU=eng", "bob", false},
		{`RULE:^CN=(.*?)\/x,(.*)$/$1\/$2/`, "CN=a/x,b", "a/b", false},
	}
	for _, c := range cases {
		m, err := ParseMappingRules(c.rules)
		if err != nil {
			t.Fatalf("%q: %v", c.rules, err)
		}
		got, err := m.Map(c.dn)
		if c.fail {
			if err == nil {
				t.Errorf("%q on %q: got %q, want failure", c.rules, c.dn, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q on %q: got %q, %v; want %q", c.rules, c.dn, got, err, c.want)
		}
	}
	for _, bad := range []string{"RULE:foo", "NOPE", "RULE:a/b/X"} {
		if _, err := ParseMappingRules(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestParseJAAS(t *testing.T) {
	j, err := ParseJAAS(`org.apache.kafka.common.security.plain.PlainLoginModule required
		username="admin" password="admin-secret" user_admin="admin-secret" user_alice="a\"lice";`)
	if err != nil {
		t.Fatal(err)
	}
	if j.Options["username"] != "admin" || j.Options["password"] != "admin-secret" {
		t.Errorf("options %v", j.Options)
	}
	users := j.PlainUsers()
	if len(users) != 2 || users["alice"] != `a"lice` {
		t.Errorf("users %v", users)
	}
	for _, bad := range []string{"", "Mod", "Mod required username=\"x\"", "Mod required a=\"b\"; more", "Mod maybe;"} {
		if _, err := ParseJAAS(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestAuthorizeAny(t *testing.T) {
	a := NewAuthorizer(nil, false)
	a.SetACLs([]ACL{
		allow(ResourceTopic, "a", PatternLiteral, "User:alice", "*", OpWrite),
		allow(ResourceTopic, "b", PatternLiteral, "User:bob", "*", OpWrite),
		deny(ResourceTopic, "b", PatternLiteral, "User:bob", "*", OpWrite),
		allow(ResourceTopic, "*", PatternLiteral, "User:carol", "*", OpAll),
		deny(ResourceTopic, "*", PatternLiteral, "User:carol", "*", OpWrite),
	})
	for p, want := range map[string]bool{"alice": true, "bob": false, "carol": false, "dave": false} {
		if got := a.AuthorizeAny(User(p), "h", OpWrite, ResourceTopic); got != want {
			t.Errorf("%s: %v, want %v", p, got, want)
		}
	}
}
