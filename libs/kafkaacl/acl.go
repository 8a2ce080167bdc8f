// Package kafkaacl is Kafka's access-control model (KIP-11, prefixed patterns KIP-290),
// shared by the coordinator, which stores ACL bindings and applies Describe/Delete
// filters to them, and kafka-gateway, whose authorizer decides each request with them.
//
// The numeric codes are Kafka's own (org.apache.kafka.common.resource.ResourceType,
// PatternType, acl.AclOperation, acl.AclPermissionType), so they go over the wire and
// into Postgres unchanged.
//
// A Binding is one ACL: a resource pattern (type, name, literal or prefixed) and an
// entry (principal "Type:Name" or "User:*", host or "*", operation, allow or deny). A
// Filter selects bindings as DescribeAcls and DeleteAcls filters do: ANY matches every
// value of a field, a nil string matches every name, and the MATCH pattern type selects
// every binding that would apply to the named resource (literal, wildcard "*" and
// prefixes of the name). Authorize (authorizer.go) decides one action.
package kafkaacl

import (
	"errors"
	"fmt"
	"strings"
)

// ResourceType is Kafka's ResourceType code.
type ResourceType int8

// Resource types (Kafka ResourceType).
const (
	ResourceUnknown         ResourceType = 0
	ResourceAny             ResourceType = 1
	ResourceTopic           ResourceType = 2
	ResourceGroup           ResourceType = 3
	ResourceCluster         ResourceType = 4
	ResourceTransactionalID ResourceType = 5
	ResourceDelegationToken ResourceType = 6
	ResourceUser            ResourceType = 7
)

// PatternType is Kafka's PatternType code.
type PatternType int8

// Pattern types (Kafka PatternType, KIP-290). MATCH and ANY occur only in filters.
const (
	PatternUnknown  PatternType = 0
	PatternAny      PatternType = 1
	PatternMatch    PatternType = 2
	PatternLiteral  PatternType = 3
	PatternPrefixed PatternType = 4
)

// Operation is Kafka's AclOperation code.
type Operation int8

// Operations (Kafka AclOperation).
const (
	OpUnknown         Operation = 0
	OpAny             Operation = 1
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

// Permission is Kafka's AclPermissionType code.
type Permission int8

// Permissions (Kafka AclPermissionType). ANY occurs only in filters.
const (
	PermissionUnknown Permission = 0
	PermissionAny     Permission = 1
	PermissionDeny    Permission = 2
	PermissionAllow   Permission = 3
)

// ClusterName is the name of the one cluster resource (Kafka's "kafka-cluster").
const ClusterName = "kafka-cluster"

// Wildcards: a literal resource name "*" matches every name of its type, a principal
// "User:*" every user, a host "*" every host.
const (
	WildcardResource  = "*"
	WildcardPrincipal = "User:*"
	WildcardHost      = "*"
)

// ErrInvalid marks a binding or filter Kafka refuses with INVALID_REQUEST.
var ErrInvalid = errors.New("invalid acl")

// Binding is one ACL.
type Binding struct {
	ResourceType ResourceType
	ResourceName string
	PatternType  PatternType
	Principal    string
	Host         string
	Operation    Operation
	Permission   Permission
}

// Filter selects bindings (Kafka AclBindingFilter). Nil strings match any value.
type Filter struct {
	ResourceType ResourceType
	ResourceName *string
	PatternType  PatternType
	Principal    *string
	Host         *string
	Operation    Operation
	Permission   Permission
}

func (t ResourceType) concrete() bool { return t >= ResourceTopic && t <= ResourceUser }

// Validate says whether b may be stored, as Kafka's CreateAcls checks it: a concrete
// resource type, a literal or prefixed pattern over a non-empty name (the cluster only
// as literal "kafka-cluster"), a principal of the form Type:Name, a host, a concrete
// operation and ALLOW or DENY. The error wraps ErrInvalid.
func (b Binding) Validate() error {
	switch {
	case !b.ResourceType.concrete():
		return fmt.Errorf("%w: resource type %d", ErrInvalid, b.ResourceType)
	case b.PatternType != PatternLiteral && b.PatternType != PatternPrefixed:
		return fmt.Errorf("%w: pattern type %d (literal or prefixed)", ErrInvalid, b.PatternType)
	case b.ResourceName == "":
		return fmt.Errorf("%w: resource name should not be empty", ErrInvalid)
	case b.ResourceType == ResourceCluster && (b.PatternType != PatternLiteral || b.ResourceName != ClusterName):
		return fmt.Errorf("%w: the only valid name for the CLUSTER resource is literal %s", ErrInvalid, ClusterName)
	case b.Operation < OpAll || b.Operation > OpDescribeTokens:
		return fmt.Errorf("%w: operation %d", ErrInvalid, b.Operation)
	case b.Permission != PermissionAllow && b.Permission != PermissionDeny:
		return fmt.Errorf("%w: permission type %d (allow or deny)", ErrInvalid, b.Permission)
	case b.Host == "":
		return fmt.Errorf("%w: host should not be empty (\"*\" is every host)", ErrInvalid)
	}
	if typ, name, ok := strings.Cut(b.Principal, ":"); !ok || typ == "" || name == "" {
		return fmt.Errorf("%w: principal %q is not of the form Type:Name", ErrInvalid, b.Principal)
	}
	return nil
}

// Validate says whether f may be used to describe or delete (Kafka refuses a filter
// with an UNKNOWN field, or a code it does not know). The error wraps ErrInvalid.
func (f Filter) Validate() error {
	switch {
	case f.ResourceType != ResourceAny && !f.ResourceType.concrete():
		return fmt.Errorf("%w: filter resource type %d", ErrInvalid, f.ResourceType)
	case f.PatternType < PatternAny || f.PatternType > PatternPrefixed:
		return fmt.Errorf("%w: filter pattern type %d", ErrInvalid, f.PatternType)
	case f.Operation < OpAny || f.Operation > OpDescribeTokens:
		return fmt.Errorf("%w: filter operation %d", ErrInvalid, f.Operation)
	case f.Permission < PermissionAny || f.Permission > PermissionAllow:
		return fmt.Errorf("%w: filter permission type %d", ErrInvalid, f.Permission)
	}
	return nil
}

// Matches reports whether f selects b (Kafka ResourcePatternFilter.matches and
// AccessControlEntryFilter.matches). Principal and host compare exactly: a filter for
// "User:alice" does not select a "User:*" binding.
func (f Filter) Matches(b Binding) bool {
	if f.ResourceType != ResourceAny && f.ResourceType != b.ResourceType {
		return false
	}
	if f.PatternType != PatternAny && f.PatternType != PatternMatch && f.PatternType != b.PatternType {
		return false
	}
	if f.ResourceName != nil {
		name := *f.ResourceName
		if f.PatternType == PatternMatch {
			switch b.PatternType {
			case PatternLiteral:
				if b.ResourceName != name && b.ResourceName != WildcardResource {
					return false
				}
			case PatternPrefixed:
				if !strings.HasPrefix(name, b.ResourceName) {
					return false
				}
			default:
				return false
			}
		} else if b.ResourceName != name {
			return false
		}
	}
	if f.Principal != nil && *f.Principal != b.Principal {
		return false
	}
	if f.Host != nil && *f.Host != b.Host {
		return false
	}
	if f.Operation != OpAny && f.Operation != b.Operation {
		return false
	}
	if f.Permission != PermissionAny && f.Permission != b.Permission {
		return false
	}
	return true
}
