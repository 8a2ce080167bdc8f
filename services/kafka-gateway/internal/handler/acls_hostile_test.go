package handler

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAclAPIsRefuseInvalidCodesPerEntry: CreateAcls and DeleteAcls answer a creation
// or filter with codes Kafka does not define (negative, UNKNOWN, ANY or MATCH where a
// binding needs a concrete value, past the last code) with INVALID_REQUEST in its own
// result, in request order, and still apply the valid ones, as Kafka's AclControlManager
// does; DescribeAcls answers such a filter INVALID_REQUEST as a whole.
func TestAclAPIsRefuseInvalidCodesPerEntry(t *testing.T) {
	e := newAuthEnv(t)
	valid := kmsg.NewCreateACLsRequestCreation()
	valid.ResourceType, valid.ResourceName, valid.ResourcePatternType = kmsg.ACLResourceTypeTopic, "t", kmsg.ACLResourcePatternTypeLiteral
	valid.Principal, valid.Host, valid.Operation, valid.PermissionType = alice, "*", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
	mutations := []func(*kmsg.CreateACLsRequestCreation){
		func(c *kmsg.CreateACLsRequestCreation) { c.ResourceType = 99 },
		func(c *kmsg.CreateACLsRequestCreation) { c.ResourceType = -1 },
		func(c *kmsg.CreateACLsRequestCreation) { c.ResourceType = kmsg.ACLResourceTypeAny },
		func(c *kmsg.CreateACLsRequestCreation) { c.ResourcePatternType = kmsg.ACLResourcePatternTypeMatch },
		func(c *kmsg.CreateACLsRequestCreation) { c.ResourcePatternType = -7 },
		func(c *kmsg.CreateACLsRequestCreation) { c.Operation = kmsg.ACLOperationAny },
		func(c *kmsg.CreateACLsRequestCreation) { c.Operation = 15 },
		func(c *kmsg.CreateACLsRequestCreation) { c.PermissionType = kmsg.ACLPermissionTypeAny },
		func(c *kmsg.CreateACLsRequestCreation) { c.PermissionType = 4 },
		func(c *kmsg.CreateACLsRequestCreation) { c.Principal = "alice" },
		func(c *kmsg.CreateACLsRequestCreation) { c.Principal = "User:" },
		func(c *kmsg.CreateACLsRequestCreation) { c.Principal = "" },
		func(c *kmsg.CreateACLsRequestCreation) { c.ResourceName = "" },
		func(c *kmsg.CreateACLsRequestCreation) {
			c.ResourceType, c.ResourceName = kmsg.ACLResourceTypeCluster, "other-cluster"
		},
	}
	create := kmsg.NewPtrCreateACLsRequest()
	for _, m := range mutations {
		c := valid
		m(&c)
		create.Creations = append(create.Creations, c)
	}
	create.Creations = append(create.Creations, valid)
	for _, v := range []int16{1, 2, 3} {
		r := e.as(t, "User:admin", create, v).(*kmsg.CreateACLsResponse)
		if len(r.Results) != len(create.Creations) {
			t.Fatalf("v%d: %d results for %d creations", v, len(r.Results), len(create.Creations))
		}
		for i, res := range r.Results[:len(mutations)] {
			if res.ErrorCode != kerr.InvalidRequest.Code || res.ErrorMessage == nil || *res.ErrorMessage == "" {
				t.Errorf("v%d creation %d %+v: %s, want INVALID_REQUEST with a message", v, i, create.Creations[i], code(res.ErrorCode))
			}
		}
		if c := r.Results[len(mutations)].ErrorCode; c != 0 {
			t.Fatalf("v%d: the valid creation beside the invalid ones: %s", v, code(c))
		}
	}

	del := kmsg.NewPtrDeleteACLsRequest()
	bad := kmsg.NewDeleteACLsRequestFilter()
	bad.ResourceType, bad.ResourcePatternType, bad.Operation, bad.PermissionType = 42, kmsg.ACLResourcePatternTypeAny, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	all := bad
	all.ResourceType = kmsg.ACLResourceTypeAny
	del.Filters = []kmsg.DeleteACLsRequestFilter{bad, all}
	dr := e.as(t, "User:admin", del, 3).(*kmsg.DeleteACLsResponse)
	if len(dr.Results) != 2 || dr.Results[0].ErrorCode != kerr.InvalidRequest.Code || len(dr.Results[0].MatchingACLs) != 0 ||
		dr.Results[1].ErrorCode != 0 || len(dr.Results[1].MatchingACLs) == 0 {
		t.Fatalf("delete with an invalid filter and an all-ANY one: %+v", dr.Results)
	}

	describe := kmsg.NewPtrDescribeACLsRequest()
	describe.ResourceType, describe.ResourcePatternType, describe.Operation, describe.PermissionType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, -3, kmsg.ACLPermissionTypeAny
	if d := e.as(t, "User:admin", describe, 3).(*kmsg.DescribeACLsResponse); d.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("describe with operation -3: %s", code(d.ErrorCode))
	}
}
