// Package acl serves tributary.coordinator.v1.AclService: the Kafka ACL bindings
// (KIP-11, KIP-290) kept in Postgres (store/acls.go, migration 00410), validated and
// matched by libs/kafkaacl. After a CreateAcls or DeleteAcls that changed a row it
// calls Changed, which the server wires to a NATS announcement on
// natsx.AclsChangedSubject, so every kafka-gateway replica reloads its authorizer cache.
package acl

import (
	"context"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/rpcerr"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// invalidRequest is Kafka's INVALID_REQUEST.
const invalidRequest = 42

// Server serves AclService over the store.
type Server struct {
	coordinatorv1.UnimplementedAclServiceServer
	store   *store.Store
	changed func()
}

// New returns the service; changed (may be nil) is called after every call that added
// or removed a binding.
func New(st *store.Store, changed func()) *Server {
	if changed == nil {
		changed = func() {}
	}
	return &Server{store: st, changed: changed}
}

// BindingFromProto converts a wire binding.
func BindingFromProto(p *coordinatorv1.AclBinding) kafkaacl.Binding {
	return kafkaacl.Binding{
		ResourceType: kafkaacl.ResourceType(p.GetResourceType()), ResourceName: p.GetResourceName(),
		PatternType: kafkaacl.PatternType(p.GetPatternType()), Principal: p.GetPrincipal(), Host: p.GetHost(),
		Operation: kafkaacl.Operation(p.GetOperation()), Permission: kafkaacl.Permission(p.GetPermissionType()),
	}
}

// BindingToProto converts a binding for the wire.
func BindingToProto(b kafkaacl.Binding) *coordinatorv1.AclBinding {
	return &coordinatorv1.AclBinding{
		ResourceType: int32(b.ResourceType), ResourceName: b.ResourceName, PatternType: int32(b.PatternType),
		Principal: b.Principal, Host: b.Host, Operation: int32(b.Operation), PermissionType: int32(b.Permission),
	}
}

// FilterFromProto converts a wire filter; a nil one matches everything.
func FilterFromProto(p *coordinatorv1.AclFilter) kafkaacl.Filter {
	if p == nil {
		return kafkaacl.Filter{ResourceType: kafkaacl.ResourceAny, PatternType: kafkaacl.PatternAny,
			Operation: kafkaacl.OpAny, Permission: kafkaacl.PermissionAny}
	}
	return kafkaacl.Filter{
		ResourceType: kafkaacl.ResourceType(p.GetResourceType()), ResourceName: p.ResourceName,
		PatternType: kafkaacl.PatternType(p.GetPatternType()), Principal: p.Principal, Host: p.Host,
		Operation: kafkaacl.Operation(p.GetOperation()), Permission: kafkaacl.Permission(p.GetPermissionType()),
	}
}

// fits reports whether v fits Kafka's int8 code fields (wider values are invalid).
func fits(vs ...int32) bool {
	for _, v := range vs {
		if v < -128 || v > 127 {
			return false
		}
	}
	return true
}

// CreateAcls implements the service.
func (s *Server) CreateAcls(ctx context.Context, req *coordinatorv1.CreateAclsRequest) (*coordinatorv1.CreateAclsResponse, error) {
	resp := &coordinatorv1.CreateAclsResponse{Results: make([]*coordinatorv1.AclResult, len(req.GetCreations()))}
	var valid []kafkaacl.Binding
	for i, c := range req.GetCreations() {
		r := &coordinatorv1.AclResult{}
		resp.Results[i] = r
		b := BindingFromProto(c)
		err := b.Validate()
		if err == nil && !fits(c.GetResourceType(), c.GetPatternType(), c.GetOperation(), c.GetPermissionType()) {
			err = kafkaacl.ErrInvalid
		}
		if err != nil {
			r.ErrorCode, r.ErrorMessage = invalidRequest, err.Error()
			continue
		}
		valid = append(valid, b)
	}
	added, err := s.store.InsertAcls(ctx, valid)
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	if added {
		s.changed()
	}
	return resp, nil
}

// DeleteAcls implements the service.
func (s *Server) DeleteAcls(ctx context.Context, req *coordinatorv1.DeleteAclsRequest) (*coordinatorv1.DeleteAclsResponse, error) {
	resp := &coordinatorv1.DeleteAclsResponse{Results: make([]*coordinatorv1.DeleteAclsFilterResult, len(req.GetFilters()))}
	var filters []kafkaacl.Filter
	var at []int
	for i, pf := range req.GetFilters() {
		resp.Results[i] = &coordinatorv1.DeleteAclsFilterResult{}
		f := FilterFromProto(pf)
		err := f.Validate()
		if err == nil && !fits(pf.GetResourceType(), pf.GetPatternType(), pf.GetOperation(), pf.GetPermissionType()) {
			err = kafkaacl.ErrInvalid
		}
		if err != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = invalidRequest, err.Error()
			continue
		}
		filters = append(filters, f)
		at = append(at, i)
	}
	if len(filters) == 0 {
		return resp, nil
	}
	deleted, err := s.store.DeleteAcls(ctx, filters)
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	removed := false
	for k, bs := range deleted {
		r := resp.Results[at[k]]
		for _, b := range bs {
			r.Deleted = append(r.Deleted, BindingToProto(b))
			removed = true
		}
	}
	if removed {
		s.changed()
	}
	return resp, nil
}

// DescribeAcls implements the service.
func (s *Server) DescribeAcls(ctx context.Context, req *coordinatorv1.DescribeAclsRequest) (*coordinatorv1.DescribeAclsResponse, error) {
	pf := req.GetFilter()
	f := FilterFromProto(pf)
	if err := f.Validate(); err != nil || !fits(pf.GetResourceType(), pf.GetPatternType(), pf.GetOperation(), pf.GetPermissionType()) {
		msg := kafkaacl.ErrInvalid.Error()
		if err != nil {
			msg = err.Error()
		}
		return &coordinatorv1.DescribeAclsResponse{ErrorCode: invalidRequest, ErrorMessage: msg}, nil
	}
	all, err := s.store.Acls(ctx)
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	resp := &coordinatorv1.DescribeAclsResponse{}
	for _, b := range all {
		if f.Matches(b) {
			resp.Acls = append(resp.Acls, BindingToProto(b))
		}
	}
	return resp, nil
}
