package kafkaacl

import "testing"

// TestAuthorizeHostileEdges: the corners of Kafka's StandardAuthorizer rules a hostile
// review tried: prefix ordering and equality, DENY over ALLOW whatever the patterns,
// the wildcard principal and resource in DENYs, implications that do not reach
// through a DENY, and principals that only look alike.
func TestAuthorizeHostileEdges(t *testing.T) {
	const alice = "User:alice"
	set := NewSet([]Binding{
		allow(ResourceTopic, "a", PatternPrefixed, alice, OpRead),
		allow(ResourceTopic, "ab", PatternPrefixed, alice, OpWrite),
		allow(ResourceTopic, "abc-x", PatternPrefixed, alice, OpDelete), // sorts after "abc"
		allow(ResourceTopic, "b", PatternPrefixed, alice, OpAlter),
		deny(ResourceTopic, "ab-", PatternPrefixed, alice, OpRead),
		allow(ResourceTopic, "lit", PatternLiteral, alice, OpAll),
		deny(ResourceTopic, "li", PatternPrefixed, WildcardPrincipal, OpWrite),
		allow(ResourceTopic, "pub", PatternLiteral, WildcardPrincipal, OpRead),
		deny(ResourceTopic, "*", PatternLiteral, "User:mallory", OpRead),
		allow(ResourceTopic, "hostile", PatternLiteral, alice, OpRead),
		{ResourceType: ResourceTopic, ResourceName: "hostile", PatternType: PatternLiteral, Principal: alice, Host: "10.0.0.1", Operation: OpRead, Permission: PermissionDeny},
		allow(ResourceGroup, "*", PatternLiteral, alice, OpRead),
		deny(ResourceTopic, "rd", PatternLiteral, alice, OpRead),
		allow(ResourceTopic, "rd", PatternLiteral, alice, OpRead),
	})
	for _, c := range []struct {
		name string
		a    Action
		want bool
	}{
		{"prefix equal to the name", topic(alice, OpRead, "a"), true},
		{"two prefixes apply", topic(alice, OpWrite, "abc"), true},
		{"a longer prefix does not apply to a shorter name", topic(alice, OpDelete, "abc"), false},
		{"a longer prefix applies to its own names", topic(alice, OpDelete, "abc-xyz"), true},
		{"the last prefix in order", topic(alice, OpAlter, "bz"), true},
		{"prefixed deny beats prefixed allow", topic(alice, OpRead, "ab-1"), false},
		{"prefixed deny does not spill over", topic(alice, OpRead, "abz"), true},
		{"prefixed deny for every user beats literal ALL", topic(alice, OpWrite, "lit"), false},
		{"ALL still grants what the deny does not name", topic(alice, OpAlterConfigs, "lit"), true},
		{"wildcard principal allow", topic("User:anyone", OpRead, "pub"), true},
		{"wildcard resource deny beats wildcard principal allow", topic("User:mallory", OpRead, "pub"), false},
		{"deny for the client's host", topic(alice, OpRead, "hostile"), false},
		{"deny and allow of the same binding: deny", topic(alice, OpRead, "rd"), false},
		{"a DENY of READ leaves the DESCRIBE an ALLOW of READ implies", topic(alice, OpDescribe, "rd"), true},
		{"a group named * matches the wildcard once", Action{Principal: alice, Host: "h", Operation: OpRead, ResourceType: ResourceGroup, ResourceName: "*"}, true},
		{"principal type is case-sensitive", topic("user:alice", OpRead, "a"), false},
		{"principal with a trailing blank", topic("User:alice ", OpRead, "a"), false},
		{"principal type differs", topic("Group:alice", OpRead, "a"), false},
		{"a user literally named *", topic("User:*", OpRead, "pub"), true},
		{"a user literally named * gets no one else's rights", topic("User:*", OpRead, "a"), false},
		{"empty principal", topic("", OpRead, "a"), false},
	} {
		if got := set.Authorize(Rules{}, c.a); got != c.want {
			t.Errorf("%s: Authorize(%+v) = %v, want %v", c.name, c.a, got, c.want)
		}
	}
}

// TestValidateOutOfRangeCodes: codes Kafka does not define (negative, or past the last
// one) are refused in bindings and filters alike.
func TestValidateOutOfRangeCodes(t *testing.T) {
	ok := allow(ResourceTopic, "t", PatternLiteral, "User:alice", OpRead)
	okF := Filter{ResourceType: ResourceAny, PatternType: PatternAny, Operation: OpAny, Permission: PermissionAny}
	for _, v := range []int8{-128, -1, 0, 16, 99, 127} {
		for name, mut := range map[string]func(*Binding, *Filter){
			"resource type": func(b *Binding, f *Filter) { b.ResourceType, f.ResourceType = ResourceType(v), ResourceType(v) },
			"operation":     func(b *Binding, f *Filter) { b.Operation, f.Operation = Operation(v), Operation(v) },
			"permission":    func(b *Binding, f *Filter) { b.Permission, f.Permission = Permission(v), Permission(v) },
			"pattern type":  func(b *Binding, f *Filter) { b.PatternType, f.PatternType = PatternType(v), PatternType(v) },
		} {
			b, f := ok, okF
			mut(&b, &f)
			if b.Validate() == nil {
				t.Errorf("binding with %s %d accepted", name, v)
			}
			if f.Validate() == nil {
				t.Errorf("filter with %s %d accepted", name, v)
			}
		}
	}
}

// TestAuthorizeAnyAllowIfNoACL: with allow.everyone.if.no.acl.found, Kafka's
// authorizeByResourceType allows when its probe resource ("hardcode") has no binding,
// although other resources of the type have some: a resource open to everyone exists.
// A binding that names the probe (a wildcard, a covering prefix) ends that.
func TestAuthorizeAnyAllowIfNoACL(t *testing.T) {
	const alice, bob = "User:alice", "User:bob"
	w := Action{Principal: alice, Host: "h", Operation: OpWrite, ResourceType: ResourceTopic}
	open := Rules{AllowIfNoACL: true}
	if !NewSet([]Binding{allow(ResourceTopic, "foo", PatternLiteral, bob, OpWrite)}).AuthorizeAny(open, w) {
		t.Error("bindings on other topics only: denied, though a topic without bindings is open to all")
	}
	if NewSet([]Binding{allow(ResourceTopic, "foo", PatternLiteral, bob, OpWrite)}).AuthorizeAny(Rules{}, w) {
		t.Error("allowed without allow-if-none")
	}
	if NewSet([]Binding{deny(ResourceTopic, "*", PatternLiteral, WildcardPrincipal, OpWrite)}).AuthorizeAny(open, w) {
		t.Error("a wildcard deny for everyone: allowed")
	}
	if NewSet([]Binding{allow(ResourceTopic, "h", PatternPrefixed, bob, OpWrite)}).AuthorizeAny(open, w) {
		t.Error("a prefix covering the probe, for someone else: allowed (Kafka denies)")
	}
	if !NewSet([]Binding{deny(ResourceTopic, "*", PatternLiteral, WildcardPrincipal, OpAll)}).AuthorizeAny(Rules{SuperUsers: map[string]bool{alice: true}}, w) {
		t.Error("super user denied by a wildcard deny")
	}
}
