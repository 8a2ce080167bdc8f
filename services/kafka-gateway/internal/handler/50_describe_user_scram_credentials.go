package handler

// DescribeUserScramCredentials (API key 50), version 0.
//
// Behaviour: the SCRAM credentials of the users asked for (all users when the list is
// null or empty), as the coordinator keeps them (CredentialService, Postgres): per user
// its mechanisms (1 SCRAM-SHA-256, 2 SCRAM-SHA-512) and iteration counts, never salts
// or keys. A user named twice is DUPLICATE_RESOURCE, a user without credentials
// RESOURCE_NOT_FOUND; the coordinator down is COORDINATOR_NOT_AVAILABLE for the whole
// request. Users of --sasl-users-file are not listed (they are not managed here).
// With the authorizer on: DESCRIBE on the cluster, else a top-level
// CLUSTER_AUTHORIZATION_FAILED.
//
// KIPs: KIP-554.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/kafka-gateway/internal/sasl"
)

func init() {
	register(kmsg.DescribeUserSCRAMCredentials.Int16(), 0, 0, (*Handler).handleDescribeUserScramCredentials)
}

// scramMechanisms maps KIP-554's mechanism numbers to names.
var scramMechanisms = map[int8]string{1: sasl.ScramSHA256, 2: sasl.ScramSHA512}

func scramMechanismNumber(name string) int8 {
	for n, m := range scramMechanisms {
		if m == name {
			return n
		}
	}
	return 0
}

func (h *Handler) handleDescribeUserScramCredentials(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	if !h.access(ctx, r).cluster(kafkaacl.OpDescribe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil
	}
	if h.creds == nil {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		resp.ErrorMessage = strPtr("no credential service")
		return resp, nil
	}
	count := map[string]int{}
	var names []string
	for _, u := range req.Users {
		if count[u.Name] == 0 {
			names = append(names, u.Name)
		}
		count[u.Name]++
	}
	var ask []string
	for _, n := range names {
		if count[n] == 1 {
			ask = append(ask, n)
		}
	}
	byUser := map[string]*coordinatorv1.UserScramCredentials{}
	var all []*coordinatorv1.UserScramCredentials
	if len(req.Users) == 0 || len(ask) > 0 {
		got, err := h.creds.DescribeScramCredentials(ctx, &coordinatorv1.DescribeScramCredentialsRequest{Users: ask})
		if err != nil {
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
			resp.ErrorMessage = strPtr("credential service: " + err.Error())
			return resp, nil
		}
		all = got.GetUsers()
		for _, u := range all {
			byUser[u.GetUser()] = u
		}
	}
	result := func(u *coordinatorv1.UserScramCredentials) kmsg.DescribeUserSCRAMCredentialsResponseResult {
		res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		res.User = u.GetUser()
		for _, c := range u.GetCredentials() {
			ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
			ci.Mechanism, ci.Iterations = scramMechanismNumber(c.GetMechanism()), c.GetIterations()
			res.CredentialInfos = append(res.CredentialInfos, ci)
		}
		if len(res.CredentialInfos) == 0 {
			res.ErrorCode = kerr.ResourceNotFound.Code
			res.ErrorMessage = strPtr("attempt to describe a user credential that does not exist")
		}
		return res
	}
	if len(req.Users) == 0 {
		for _, u := range all {
			resp.Results = append(resp.Results, result(u))
		}
		return resp, nil
	}
	for _, n := range names {
		if count[n] > 1 {
			res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
			res.User, res.ErrorCode = n, kerr.DuplicateResource.Code
			res.ErrorMessage = strPtr("cannot describe SCRAM credentials for the same user twice in a single request")
			resp.Results = append(resp.Results, res)
			continue
		}
		u := byUser[n]
		if u == nil {
			u = &coordinatorv1.UserScramCredentials{User: n}
		}
		resp.Results = append(resp.Results, result(u))
	}
	return resp, nil
}
