package kafkaacl

import (
	"sort"
	"strings"
)

// Set is an immutable index of bindings for authorization. Build it with NewSet; it is
// safe for concurrent use.
type Set struct {
	literal  map[ResourceType]map[string][]Binding
	prefixed map[ResourceType][]Binding // sorted by name
	all      []Binding
}

// NewSet indexes bs (duplicates are harmless).
func NewSet(bs []Binding) *Set {
	s := &Set{literal: map[ResourceType]map[string][]Binding{}, prefixed: map[ResourceType][]Binding{}, all: bs}
	for _, b := range bs {
		switch b.PatternType {
		case PatternLiteral:
			m := s.literal[b.ResourceType]
			if m == nil {
				m = map[string][]Binding{}
				s.literal[b.ResourceType] = m
			}
			m[b.ResourceName] = append(m[b.ResourceName], b)
		case PatternPrefixed:
			s.prefixed[b.ResourceType] = append(s.prefixed[b.ResourceType], b)
		}
	}
	for _, p := range s.prefixed {
		sort.Slice(p, func(i, j int) bool { return p[i].ResourceName < p[j].ResourceName })
	}
	return s
}

// Len is the number of bindings in s (0 for nil).
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.all)
}

// Bindings returns every binding of s; the caller must not change it.
func (s *Set) Bindings() []Binding { return s.all }

// Action is one thing a principal asks to do.
type Action struct {
	// Principal is "Type:Name" (KafkaPrincipal), Host the client's address without
	// port ("127.0.0.1").
	Principal, Host string
	Operation       Operation
	ResourceType    ResourceType
	ResourceName    string
}

// Rules are the authorizer's settings beyond the bindings.
type Rules struct {
	// SuperUsers are principals allowed everything (Kafka super.users).
	SuperUsers map[string]bool
	// AllowIfNoACL allows an action on a resource no binding names (Kafka
	// allow.everyone.if.no.acl.found).
	AllowIfNoACL bool
}

// forEach calls fn with every binding that applies to the resource: literal of its
// name, literal "*", and prefixed patterns the name starts with.
func (s *Set) forEach(t ResourceType, name string, fn func(Binding)) {
	if m := s.literal[t]; m != nil {
		for _, b := range m[name] {
			fn(b)
		}
		if name != WildcardResource {
			for _, b := range m[WildcardResource] {
				fn(b)
			}
		}
	}
	for _, b := range s.prefixed[t] {
		if b.ResourceName > name {
			break // sorted: no later prefix can be a prefix of name
		}
		if strings.HasPrefix(name, b.ResourceName) {
			fn(b)
		}
	}
}

func (b Binding) entryApplies(principal, host string) bool {
	return (b.Principal == principal || b.Principal == WildcardPrincipal) &&
		(b.Host == host || b.Host == WildcardHost)
}

// implies reports whether an ALLOW for granted permits op: the operation itself, ALL,
// DESCRIBE from READ, WRITE, DELETE or ALTER, DESCRIBE_CONFIGS from ALTER_CONFIGS
// (Kafka's AclAuthorizer/StandardAuthorizer rules).
func implies(granted, op Operation) bool {
	if granted == op || granted == OpAll {
		return true
	}
	switch op {
	case OpDescribe:
		return granted == OpRead || granted == OpWrite || granted == OpDelete || granted == OpAlter
	case OpDescribeConfigs:
		return granted == OpAlterConfigs
	}
	return false
}

// Authorize decides a: super users are allowed; a matching DENY (the operation or ALL)
// wins over any ALLOW; then a matching ALLOW (with the implications above) allows; a
// resource no binding names at all follows r.AllowIfNoACL; anything else is denied.
func (s *Set) Authorize(r Rules, a Action) bool {
	if r.SuperUsers[a.Principal] {
		return true
	}
	found, allowed, denied := false, false, false
	s.forEach(a.ResourceType, a.ResourceName, func(b Binding) {
		found = true
		if !b.entryApplies(a.Principal, a.Host) {
			return
		}
		switch b.Permission {
		case PermissionDeny:
			if b.Operation == a.Operation || b.Operation == OpAll {
				denied = true
			}
		case PermissionAllow:
			if implies(b.Operation, a.Operation) {
				allowed = true
			}
		}
	})
	switch {
	case denied:
		return false
	case allowed:
		return true
	}
	return !found && r.AllowIfNoACL
}

// AuthorizeAny reports whether the principal may do a.Operation on at least one
// resource of a.ResourceType (Kafka's authorizeByResourceType, KIP-679; a.ResourceName
// is ignored): some ALLOW applies whose pattern no DENY covers (a DENY of literal "*",
// of the same literal name, or of a prefix of the allowed name). Like Kafka it first
// decides a.Operation on a resource literally named "hardcode" (probeName): so super
// users are allowed, and so is everyone under r.AllowIfNoACL when no binding names
// that resource (some resource of the type is then open to all).
func (s *Set) AuthorizeAny(r Rules, a Action) bool {
	probe := a
	probe.ResourceName = probeName
	if s.Authorize(r, probe) {
		return true
	}
	var allows, denies []Binding
	for _, b := range s.all {
		if b.ResourceType != a.ResourceType {
			continue
		}
		if !b.entryApplies(a.Principal, a.Host) {
			continue
		}
		switch {
		case b.Permission == PermissionDeny && (b.Operation == a.Operation || b.Operation == OpAll):
			denies = append(denies, b)
		case b.Permission == PermissionAllow && implies(b.Operation, a.Operation):
			allows = append(allows, b)
		}
	}
	covered := func(al Binding) bool {
		for _, d := range denies {
			switch d.PatternType {
			case PatternLiteral:
				if d.ResourceName == WildcardResource || (al.PatternType == PatternLiteral && d.ResourceName == al.ResourceName) {
					return true
				}
			case PatternPrefixed:
				if strings.HasPrefix(al.ResourceName, d.ResourceName) {
					return true
				}
			}
		}
		return false
	}
	for _, al := range allows {
		if !covered(al) {
			return true
		}
	}
	return false
}

// probeName is the resource name Kafka's authorizeByResourceType decides first.
const probeName = "hardcode"

// Operations lists the operations Kafka defines for each resource type, the ones
// authorized_operations (KIP-430) reports on.
var Operations = map[ResourceType][]Operation{
	ResourceTopic:           {OpRead, OpWrite, OpCreate, OpDescribe, OpDelete, OpAlter, OpDescribeConfigs, OpAlterConfigs},
	ResourceGroup:           {OpRead, OpDescribe, OpDelete},
	ResourceCluster:         {OpCreate, OpClusterAction, OpDescribeConfigs, OpAlterConfigs, OpIdempotentWrite, OpAlter, OpDescribe},
	ResourceTransactionalID: {OpDescribe, OpWrite},
	ResourceDelegationToken: {OpDescribe},
	ResourceUser:            {OpCreateTokens, OpDescribeTokens},
}

// AuthorizedOperations is KIP-430's bit field for a resource: bit 1<<op set for each
// operation of Operations[a.ResourceType] Authorize allows (a.Operation is ignored).
func (s *Set) AuthorizedOperations(r Rules, a Action) int32 {
	var bits int32
	for _, op := range Operations[a.ResourceType] {
		a.Operation = op
		if s.Authorize(r, a) {
			bits |= 1 << op
		}
	}
	return bits
}
