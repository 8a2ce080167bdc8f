package kafkaacl

import (
	"errors"
	"testing"
)

func allow(t ResourceType, name string, pt PatternType, principal string, op Operation) Binding {
	return Binding{ResourceType: t, ResourceName: name, PatternType: pt, Principal: principal, Host: "*", Operation: op, Permission: PermissionAllow}
}

func deny(t ResourceType, name string, pt PatternType, principal string, op Operation) Binding {
	b := allow(t, name, pt, principal, op)
	b.Permission = PermissionDeny
	return b
}

func topic(principal string, op Operation, name string) Action {
	return Action{Principal: principal, Host: "10.0.0.1", Operation: op, ResourceType: ResourceTopic, ResourceName: name}
}

func TestAuthorize(t *testing.T) {
	const alice, bob = "User:alice", "User:bob"
	set := NewSet([]Binding{
		allow(ResourceTopic, "a", PatternLiteral, alice, OpRead),
		allow(ResourceTopic, "logs-", PatternPrefixed, alice, OpWrite),
		deny(ResourceTopic, "logs-secret", PatternLiteral, alice, OpAll),
		allow(ResourceTopic, "pub", PatternLiteral, WildcardPrincipal, OpDescribe),
		allow(ResourceTopic, "*", PatternLiteral, bob, OpAlterConfigs),
		{ResourceType: ResourceTopic, ResourceName: "hosted", PatternType: PatternLiteral, Principal: alice, Host: "10.0.0.9", Operation: OpRead, Permission: PermissionAllow},
		allow(ResourceGroup, "g", PatternLiteral, alice, OpRead),
		deny(ResourceGroup, "g", PatternLiteral, WildcardPrincipal, OpDelete),
	})
	rules := Rules{}
	cases := []struct {
		name string
		a    Action
		want bool
	}{
		{"literal read", topic(alice, OpRead, "a"), true},
		{"read implies describe", topic(alice, OpDescribe, "a"), true},
		{"read does not imply write", topic(alice, OpWrite, "a"), false},
		{"other topic", topic(alice, OpRead, "b"), false},
		{"other principal", topic(bob, OpRead, "a"), false},
		{"prefixed write", topic(alice, OpWrite, "logs-x"), true},
		{"prefix is not the name's", topic(alice, OpWrite, "log"), false},
		{"deny all wins over prefixed allow", topic(alice, OpWrite, "logs-secret"), false},
		{"deny all denies implied describe", topic(alice, OpDescribe, "logs-secret"), false},
		{"wildcard principal", topic(bob, OpDescribe, "pub"), true},
		{"describe does not imply read", topic(bob, OpRead, "pub"), false},
		{"wildcard resource, alter_configs implies describe_configs", topic(bob, OpDescribeConfigs, "anything"), true},
		{"alter_configs does not imply describe", topic(bob, OpDescribe, "anything"), false},
		{"host must match", topic(alice, OpRead, "hosted"), false},
		{"group read", Action{Principal: alice, Host: "h", Operation: OpRead, ResourceType: ResourceGroup, ResourceName: "g"}, true},
		{"group delete denied to every user", Action{Principal: alice, Host: "h", Operation: OpDelete, ResourceType: ResourceGroup, ResourceName: "g"}, false},
		{"cluster: no acls, no allow-if-none", Action{Principal: alice, Host: "h", Operation: OpCreate, ResourceType: ResourceCluster, ResourceName: ClusterName}, false},
	}
	for _, c := range cases {
		if got := set.Authorize(rules, c.a); got != c.want {
			t.Errorf("%s: Authorize(%+v) = %v, want %v", c.name, c.a, got, c.want)
		}
	}

	h := Action{Principal: "User:hostile", Host: "h", Operation: OpAll, ResourceType: ResourceTopic, ResourceName: "zzz"}
	// zzz is named by the "*" binding for bob, so allow-if-none does not apply.
	if set.Authorize(Rules{AllowIfNoACL: true}, h) {
		t.Error("allow-if-none applied to a resource a wildcard binding names")
	}
	c := Action{Principal: alice, Host: "h", Operation: OpCreate, ResourceType: ResourceCluster, ResourceName: ClusterName}
	if !set.Authorize(Rules{AllowIfNoACL: true}, c) {
		t.Error("allow-if-none did not allow a resource without bindings")
	}
	if !set.Authorize(Rules{SuperUsers: map[string]bool{"User:root": true}}, topic("User:root", OpDelete, "logs-secret")) {
		t.Error("super user denied")
	}
}

func TestAuthorizeAny(t *testing.T) {
	const alice = "User:alice"
	w := Action{Principal: alice, Host: "h", Operation: OpWrite, ResourceType: ResourceTopic}
	if NewSet(nil).AuthorizeAny(Rules{}, w) {
		t.Error("no bindings allowed")
	}
	if !NewSet(nil).AuthorizeAny(Rules{AllowIfNoACL: true}, w) {
		t.Error("no bindings with allow-if-none denied")
	}
	if !NewSet([]Binding{allow(ResourceTopic, "t", PatternLiteral, alice, OpWrite)}).AuthorizeAny(Rules{}, w) {
		t.Error("literal write not found")
	}
	if NewSet([]Binding{allow(ResourceTopic, "t", PatternLiteral, alice, OpRead)}).AuthorizeAny(Rules{}, w) {
		t.Error("read counted as write")
	}
	if NewSet([]Binding{
		allow(ResourceTopic, "t", PatternLiteral, alice, OpWrite),
		deny(ResourceTopic, "*", PatternLiteral, alice, OpWrite),
	}).AuthorizeAny(Rules{}, w) {
		t.Error("wildcard deny ignored")
	}
	if NewSet([]Binding{
		allow(ResourceTopic, "logs-a", PatternPrefixed, alice, OpWrite),
		deny(ResourceTopic, "logs-", PatternPrefixed, alice, OpAll),
	}).AuthorizeAny(Rules{}, w) {
		t.Error("covering prefixed deny ignored")
	}
	if !NewSet([]Binding{
		allow(ResourceTopic, "logs-a", PatternPrefixed, alice, OpWrite),
		deny(ResourceTopic, "other", PatternLiteral, alice, OpAll),
	}).AuthorizeAny(Rules{}, w) {
		t.Error("unrelated deny counted")
	}
}

func TestAuthorizedOperations(t *testing.T) {
	set := NewSet([]Binding{allow(ResourceTopic, "a", PatternLiteral, "User:alice", OpRead)})
	got := set.AuthorizedOperations(Rules{}, topic("User:alice", OpUnknown, "a"))
	if want := int32(1<<OpRead | 1<<OpDescribe); got != want {
		t.Fatalf("authorized operations %b, want %b", got, want)
	}
}

func TestFilterMatches(t *testing.T) {
	str := func(s string) *string { return &s }
	bs := []Binding{
		allow(ResourceTopic, "a", PatternLiteral, "User:alice", OpRead),          // 0
		allow(ResourceTopic, "*", PatternLiteral, "User:alice", OpRead),          // 1
		allow(ResourceTopic, "ab", PatternPrefixed, "User:alice", OpRead),        // 2
		allow(ResourceTopic, "abc", PatternLiteral, "User:*", OpWrite),           // 3
		deny(ResourceGroup, "abc", PatternLiteral, "User:alice", OpRead),         // 4
		allow(ResourceCluster, ClusterName, PatternLiteral, "User:bob", OpAlter), // 5
	}
	anyFilter := Filter{ResourceType: ResourceAny, PatternType: PatternAny, Operation: OpAny, Permission: PermissionAny}
	cases := []struct {
		name string
		f    func(Filter) Filter
		want []int
	}{
		{"everything", func(f Filter) Filter { return f }, []int{0, 1, 2, 3, 4, 5}},
		{"topics", func(f Filter) Filter { f.ResourceType = ResourceTopic; return f }, []int{0, 1, 2, 3}},
		{"literal abc any type", func(f Filter) Filter { f.ResourceName = str("abc"); f.PatternType = PatternLiteral; return f }, []int{3, 4}},
		{"any pattern named ab", func(f Filter) Filter { f.ResourceName = str("ab"); return f }, []int{2}},
		{"match abc topic", func(f Filter) Filter {
			f.ResourceType, f.ResourceName, f.PatternType = ResourceTopic, str("abc"), PatternMatch
			return f
		}, []int{1, 2, 3}},
		{"prefixed only", func(f Filter) Filter { f.PatternType = PatternPrefixed; return f }, []int{2}},
		{"principal exact (no wildcard)", func(f Filter) Filter { f.Principal = str("User:bob"); return f }, []int{5}},
		{"host exact", func(f Filter) Filter { f.Host = str("10.0.0.1"); return f }, nil},
		{"deny", func(f Filter) Filter { f.Permission = PermissionDeny; return f }, []int{4}},
		{"write", func(f Filter) Filter { f.Operation = OpWrite; return f }, []int{3}},
	}
	for _, c := range cases {
		f := c.f(anyFilter)
		if err := f.Validate(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []int
		for i, b := range bs {
			if f.Matches(b) {
				got = append(got, i)
			}
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: matched %v, want %v", c.name, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: matched %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
	bad := anyFilter
	bad.Operation = OpUnknown
	if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown operation filter: %v", err)
	}
	bad = anyFilter
	bad.ResourceType = 9
	if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("resource type 9 filter: %v", err)
	}
}

func TestBindingValidate(t *testing.T) {
	ok := allow(ResourceTopic, "t", PatternLiteral, "User:alice", OpRead)
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Binding){
		"any type":       func(b *Binding) { b.ResourceType = ResourceAny },
		"match pattern":  func(b *Binding) { b.PatternType = PatternMatch },
		"empty name":     func(b *Binding) { b.ResourceName = "" },
		"any op":         func(b *Binding) { b.Operation = OpAny },
		"any permission": func(b *Binding) { b.Permission = PermissionAny },
		"bare principal": func(b *Binding) { b.Principal = "alice" },
		"empty host":     func(b *Binding) { b.Host = "" },
		"cluster name":   func(b *Binding) { b.ResourceType = ResourceCluster },
		"prefixed clust.": func(b *Binding) {
			b.ResourceType, b.ResourceName, b.PatternType = ResourceCluster, ClusterName, PatternPrefixed
		},
	} {
		b := ok
		mut(&b)
		if err := b.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
