// Package credentials serves CredentialService: the SCRAM credentials of Kafka users
// (KIP-554) in Postgres (package store). Each change is announced through Notify with
// the user name, which the server publishes on natsx.CredentialsChangedSubject so
// every kafka-gateway replica drops its cached copy.
package credentials

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// Iteration bounds of a stored SCRAM credential, Kafka's (KIP-554): kafka-gateway
// refuses AlterUserScramCredentials outside them and authenticates nobody with a
// credential outside them.
const (
	MinIterations = 4096
	MaxIterations = 16384
)

// Server implements coordinatorv1.CredentialServiceServer.
type Server struct {
	coordinatorv1.UnimplementedCredentialServiceServer

	store  *store.Store
	notify func(user string)
}

// New returns a Server over st; notify (may be nil) is called with each changed user
// after the change is committed.
func New(st *store.Store, notify func(user string)) *Server {
	if notify == nil {
		notify = func(string) {}
	}
	return &Server{store: st, notify: notify}
}

func statusOf(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, store.ErrCredentialNotFound):
		return status.Error(codes.NotFound, err.Error())
	case store.Unavailable(err):
		return status.Errorf(codes.Unavailable, "postgres: %v", err)
	default:
		return status.Errorf(codes.Internal, "postgres: %v", err)
	}
}

// GetScramCredential implements CredentialService.
func (s *Server) GetScramCredential(ctx context.Context, req *coordinatorv1.GetScramCredentialRequest) (*coordinatorv1.GetScramCredentialResponse, error) {
	if req.GetUser() == "" || req.GetMechanism() == "" {
		return nil, status.Error(codes.InvalidArgument, "user and mechanism are required")
	}
	c, err := s.store.GetScramCredential(ctx, req.GetUser(), req.GetMechanism())
	if err != nil {
		return nil, statusOf(err)
	}
	return &coordinatorv1.GetScramCredentialResponse{Credential: &coordinatorv1.ScramCredential{
		User: c.User, Mechanism: c.Mechanism, Salt: c.Salt, Iterations: c.Iterations,
		StoredKey: c.StoredKey, ServerKey: c.ServerKey,
	}}, nil
}

// DescribeScramCredentials implements CredentialService.
func (s *Server) DescribeScramCredentials(ctx context.Context, req *coordinatorv1.DescribeScramCredentialsRequest) (*coordinatorv1.DescribeScramCredentialsResponse, error) {
	creds, err := s.store.ListScramCredentials(ctx, req.GetUsers())
	if err != nil {
		return nil, statusOf(err)
	}
	resp := &coordinatorv1.DescribeScramCredentialsResponse{}
	byUser := map[string]*coordinatorv1.UserScramCredentials{}
	for _, c := range creds {
		u := byUser[c.User]
		if u == nil {
			u = &coordinatorv1.UserScramCredentials{User: c.User}
			byUser[c.User] = u
			resp.Users = append(resp.Users, u)
		}
		u.Credentials = append(u.Credentials, &coordinatorv1.ScramCredentialInfo{Mechanism: c.Mechanism, Iterations: c.Iterations})
	}
	if len(req.GetUsers()) > 0 {
		// Requested users in request order, those without a credential with none.
		ordered := make([]*coordinatorv1.UserScramCredentials, 0, len(req.GetUsers()))
		seen := map[string]bool{}
		for _, name := range req.GetUsers() {
			if seen[name] {
				continue
			}
			seen[name] = true
			u := byUser[name]
			if u == nil {
				u = &coordinatorv1.UserScramCredentials{User: name}
			}
			ordered = append(ordered, u)
		}
		resp.Users = ordered
	}
	return resp, nil
}

// AlterScramCredentials implements CredentialService.
func (s *Server) AlterScramCredentials(ctx context.Context, req *coordinatorv1.AlterScramCredentialsRequest) (*coordinatorv1.AlterScramCredentialsResponse, error) {
	var dels []store.ScramKey
	users := map[string]bool{}
	for _, d := range req.GetDeletions() {
		if d.GetUser() == "" || d.GetMechanism() == "" {
			return nil, status.Error(codes.InvalidArgument, "deletion: user and mechanism are required")
		}
		dels = append(dels, store.ScramKey{User: d.GetUser(), Mechanism: d.GetMechanism()})
		users[d.GetUser()] = true
	}
	var ups []store.ScramCredential
	for _, u := range req.GetUpsertions() {
		if u.GetUser() == "" || u.GetMechanism() == "" || len(u.GetSalt()) == 0 || len(u.GetStoredKey()) == 0 || len(u.GetServerKey()) == 0 || u.GetIterations() <= 0 {
			return nil, status.Error(codes.InvalidArgument, "upsertion: user, mechanism, salt, iterations and keys are required")
		}
		if u.GetIterations() < MinIterations || u.GetIterations() > MaxIterations {
			return nil, status.Errorf(codes.InvalidArgument, "upsertion: %d iterations, want %d..%d (KIP-554)", u.GetIterations(), MinIterations, MaxIterations)
		}
		ups = append(ups, store.ScramCredential{User: u.GetUser(), Mechanism: u.GetMechanism(), Salt: u.GetSalt(),
			Iterations: u.GetIterations(), StoredKey: u.GetStoredKey(), ServerKey: u.GetServerKey()})
		users[u.GetUser()] = true
	}
	missing, err := s.store.AlterScramCredentials(ctx, dels, ups)
	if err != nil {
		return nil, statusOf(err)
	}
	for u := range users {
		s.notify(u)
	}
	resp := &coordinatorv1.AlterScramCredentialsResponse{}
	for _, m := range missing {
		resp.Missing = append(resp.Missing, &coordinatorv1.ScramCredentialKey{User: m.User, Mechanism: m.Mechanism})
	}
	return resp, nil
}
