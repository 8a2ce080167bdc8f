package handler

// AlterUserScramCredentials (API key 51), version 0.
//
// Behaviour: deletes and upserts users' SCRAM credentials in the coordinator
// (CredentialService, Postgres), one result per user named. An upsertion carries the
// salt, the iteration count and the salted password the client computed (KIP-554);
// only the StoredKey and ServerKey derived from it are stored. Validation, as Kafka's
// ScramControlManager (Kafka 4, KRaft) does, fails every alteration of the user
// concerned: an empty user name or salt, or an iteration count outside 4096..16384 is
// UNACCEPTABLE_CREDENTIAL; an unknown mechanism UNSUPPORTED_SASL_MECHANISM; a user
// named twice in the request, whatever the mechanisms, DUPLICATE_RESOURCE (unless its
// first alteration already failed, which then gives the code), so a user's two SCRAM
// mechanisms are set in two requests, as with Kafka 4; deleting a credential that does
// not exist RESOURCE_NOT_FOUND; the coordinator down COORDINATOR_NOT_AVAILABLE.
// The coordinator announces the change on NATS, so every gateway replica authenticates
// with the new credential at once (and the one that handled it drops its cache itself).
// Connections already authenticated stay so (as in Kafka) until they re-authenticate.
// With the authorizer on: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for
// every user named, nothing changed.
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
	register(kmsg.AlterUserSCRAMCredentials.Int16(), 0, 0, (*Handler).handleAlterUserScramCredentials)
}

func (h *Handler) handleAlterUserScramCredentials(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	if !h.access(ctx, r).cluster(kafkaacl.OpAlter) {
		seen := map[string]bool{}
		deny := func(user string) {
			if !seen[user] {
				seen[user] = true
				res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
				res.User, res.ErrorCode = user, kerr.ClusterAuthorizationFailed.Code
				resp.Results = append(resp.Results, res)
			}
		}
		for _, d := range req.Deletions {
			deny(d.Name)
		}
		for _, u := range req.Upsertions {
			deny(u.Name)
		}
		return resp, nil
	}

	type fail struct {
		code int16
		msg  string
	}
	var users []string
	failed := map[string]*fail{}
	seenUser := map[string]bool{}
	note := func(user string) {
		if !seenUser[user] {
			seenUser[user] = true
			users = append(users, user)
		}
	}
	setFail := func(user string, code int16, msg string) {
		if failed[user] == nil {
			failed[user] = &fail{code, msg}
		}
	}
	check := func(user string, mech int8) string {
		again := seenUser[user]
		note(user)
		name, ok := scramMechanisms[mech]
		switch {
		case again:
			setFail(user, kerr.DuplicateResource.Code, "a user credential cannot be altered twice in the same request")
		case user == "":
			setFail(user, kerr.UnacceptableCredential.Code, "username must not be empty")
		case !ok:
			setFail(user, kerr.UnsupportedSaslMechanism.Code, "unknown SCRAM mechanism")
		}
		return name
	}
	var dels []*coordinatorv1.ScramCredentialKey
	for _, d := range req.Deletions {
		if name := check(d.Name, d.Mechanism); name != "" {
			dels = append(dels, &coordinatorv1.ScramCredentialKey{User: d.Name, Mechanism: name})
		}
	}
	var ups []*coordinatorv1.ScramCredential
	for _, u := range req.Upsertions {
		name := check(u.Name, u.Mechanism)
		switch {
		case name == "":
			continue
		case u.Iterations < sasl.MinIterations:
			setFail(u.Name, kerr.UnacceptableCredential.Code, "too few iterations (at least 4096)")
			continue
		case u.Iterations > sasl.MaxIterations:
			setFail(u.Name, kerr.UnacceptableCredential.Code, "too many iterations (at most 16384)")
			continue
		case len(u.Salt) == 0:
			setFail(u.Name, kerr.UnacceptableCredential.Code, "salt must not be empty")
			continue
		case len(u.SaltedPassword) == 0:
			setFail(u.Name, kerr.UnacceptableCredential.Code, "salted password must not be empty")
			continue
		}
		stored, server := sasl.KeysFromSalted(name, u.SaltedPassword)
		ups = append(ups, &coordinatorv1.ScramCredential{User: u.Name, Mechanism: name, Salt: u.Salt,
			Iterations: u.Iterations, StoredKey: stored, ServerKey: server})
	}
	// Only users without a failure are altered.
	keep := &coordinatorv1.AlterScramCredentialsRequest{}
	for _, d := range dels {
		if failed[d.GetUser()] == nil {
			keep.Deletions = append(keep.Deletions, d)
		}
	}
	for _, u := range ups {
		if failed[u.GetUser()] == nil {
			keep.Upsertions = append(keep.Upsertions, u)
		}
	}
	if len(keep.Deletions)+len(keep.Upsertions) > 0 {
		if h.creds == nil {
			for _, u := range users {
				setFail(u, kerr.CoordinatorNotAvailable.Code, "no credential service")
			}
		} else if got, err := h.creds.AlterScramCredentials(ctx, keep); err != nil {
			for _, u := range users {
				setFail(u, kerr.CoordinatorNotAvailable.Code, "credential service: "+err.Error())
			}
		} else {
			for _, m := range got.GetMissing() {
				setFail(m.GetUser(), kerr.ResourceNotFound.Code, "attempt to delete a user credential that does not exist")
			}
			if h.credsChanged != nil {
				for _, u := range users {
					h.credsChanged(u)
				}
			}
		}
	}
	for _, u := range users {
		res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		res.User = u
		if f := failed[u]; f != nil {
			res.ErrorCode, res.ErrorMessage = f.code, strPtr(f.msg)
		}
		resp.Results = append(resp.Results, res)
	}
	return resp, nil
}
