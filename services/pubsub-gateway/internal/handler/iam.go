package handler

import (
	"context"
	"sync"

	"cloud.google.com/go/iam/apiv1/iampb"
)

// IAM is the permissive google.iam.v1.IAMPolicy of emulator mode: every permission is
// granted; a policy set is kept in memory (per replica) and handed back by Get.
type IAM struct {
	iampb.UnimplementedIAMPolicyServer

	mu       sync.Mutex
	policies map[string]*iampb.Policy
}

// NewIAM returns an empty permissive IAMPolicy server.
func NewIAM() *IAM { return &IAM{policies: map[string]*iampb.Policy{}} }

// SetIamPolicy stores the policy and returns it.
func (i *IAM) SetIamPolicy(_ context.Context, req *iampb.SetIamPolicyRequest) (*iampb.Policy, error) {
	if req.GetResource() == "" {
		return nil, invalid("resource is required")
	}
	p := req.GetPolicy()
	if p == nil {
		p = &iampb.Policy{}
	}
	if len(p.GetEtag()) == 0 {
		p.Etag = []byte("ACAB")
	}
	i.mu.Lock()
	i.policies[req.GetResource()] = p
	i.mu.Unlock()
	return p, nil
}

// GetIamPolicy returns the policy last set, or an empty one.
func (i *IAM) GetIamPolicy(_ context.Context, req *iampb.GetIamPolicyRequest) (*iampb.Policy, error) {
	if req.GetResource() == "" {
		return nil, invalid("resource is required")
	}
	i.mu.Lock()
	p, ok := i.policies[req.GetResource()]
	i.mu.Unlock()
	if !ok {
		p = &iampb.Policy{Version: 1, Etag: []byte("ACAB")}
	}
	return p, nil
}

// TestIamPermissions grants every permission asked for.
func (i *IAM) TestIamPermissions(_ context.Context, req *iampb.TestIamPermissionsRequest) (*iampb.TestIamPermissionsResponse, error) {
	if req.GetResource() == "" {
		return nil, invalid("resource is required")
	}
	return &iampb.TestIamPermissionsResponse{Permissions: req.GetPermissions()}, nil
}
