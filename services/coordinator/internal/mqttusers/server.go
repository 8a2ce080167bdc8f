// Package mqttusers serves MqttUserService: the mqtt-bridge listener's logins in
// Postgres (package store). Passwords are hashed here (libs/passhash: argon2id by
// default, bcrypt on request) and only hashes are stored. Each change is announced
// through Notify with the user name, which the server publishes on
// natsx.MqttUsersChangedSubject so every bridge replica drops its cached copy.
// cli.go is the `coordinator mqtt-users` command that drives the service.
package mqttusers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/passhash"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/rpcerr"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// Limits of what PutMqttUser accepts.
const (
	// maxName is MQTT's limit on a UTF-8 string (a CONNECT's user name), in bytes.
	maxName = 65535
	// maxPassword bounds a password to hash with argon2id, in bytes (bcrypt's own
	// limit is 72).
	maxPassword       = 1024
	maxBcryptPassword = 72
	// maxFilters bounds each rule list.
	maxFilters = 1000
)

// Server implements coordinatorv1.MqttUserServiceServer.
type Server struct {
	coordinatorv1.UnimplementedMqttUserServiceServer

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

// statusOf is err as a gRPC status: NOT_FOUND for a user not kept, else rpcerr's rule
// (UNAVAILABLE for Postgres failures).
func statusOf(err error) error {
	if errors.Is(err, store.ErrMqttUserNotFound) {
		return status.Error(codes.NotFound, err.Error())
	}
	return rpcerr.Status(err)
}

func checkName(name string) error {
	if name == "" || len(name) > maxName || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return status.Errorf(codes.InvalidArgument, "username must be 1..%d bytes of UTF-8 without NUL", maxName)
	}
	return nil
}

// checkFilter validates an MQTT topic filter (MQTT 5 §4.7): not empty, '#' only as
// the whole last level, '+' only as a whole level, UTF-8 without NUL.
func checkFilter(f string) error {
	if f == "" || len(f) > maxName || !utf8.ValidString(f) || strings.ContainsRune(f, 0) {
		return fmt.Errorf("filter %q: must be 1..%d bytes of UTF-8 without NUL", f, maxName)
	}
	levels := strings.Split(f, "/")
	for i, lv := range levels {
		if strings.Contains(lv, "#") && (lv != "#" || i != len(levels)-1) {
			return fmt.Errorf("filter %q: # must be the whole last level", f)
		}
		if strings.Contains(lv, "+") && lv != "+" {
			return fmt.Errorf("filter %q: + must be a whole level", f)
		}
	}
	return nil
}

func rulesOf(r *coordinatorv1.MqttTopicRules) ([]string, error) {
	if r == nil {
		return nil, nil
	}
	if len(r.GetFilters()) > maxFilters {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d filters", maxFilters)
	}
	out := make([]string, 0, len(r.GetFilters()))
	for _, f := range r.GetFilters() {
		if err := checkFilter(f); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		out = append(out, f)
	}
	return out, nil
}

func rulesPB(f []string) *coordinatorv1.MqttTopicRules {
	if f == nil {
		return nil
	}
	return &coordinatorv1.MqttTopicRules{Filters: f}
}

func userPB(u *store.MqttUser, withHash bool) *coordinatorv1.MqttUser {
	out := &coordinatorv1.MqttUser{Username: u.Username, Publish: rulesPB(u.Publish), Subscribe: rulesPB(u.Subscribe), UpdatedAtMs: u.UpdatedAt.UnixMilli()}
	if h, err := passhash.Parse(u.PasswordHash); err == nil {
		out.Scheme = string(h.Scheme())
	}
	if withHash {
		out.PasswordHash = u.PasswordHash
	}
	return out
}

// hashOf is the hash to store for req: its password hashed with its scheme, or its
// hash once passhash accepts it, or "" (keep the stored one).
func hashOf(req *coordinatorv1.PutMqttUserRequest) (string, error) {
	switch c := req.GetCredential().(type) {
	case *coordinatorv1.PutMqttUserRequest_PasswordHash:
		if _, err := passhash.Parse(c.PasswordHash); err != nil {
			return "", status.Errorf(codes.InvalidArgument, "password_hash: %v", err)
		}
		return c.PasswordHash, nil
	case *coordinatorv1.PutMqttUserRequest_Password:
		pw := []byte(c.Password)
		switch req.GetScheme() {
		case "", string(passhash.Argon2id):
			if len(pw) == 0 || len(pw) > maxPassword {
				return "", status.Errorf(codes.InvalidArgument, "password must be 1..%d bytes", maxPassword)
			}
			h, err := passhash.HashArgon2id(pw)
			if err != nil {
				return "", status.Errorf(codes.Internal, "hash: %v", err)
			}
			return h, nil
		case string(passhash.Bcrypt):
			if len(pw) == 0 || len(pw) > maxBcryptPassword {
				return "", status.Errorf(codes.InvalidArgument, "password must be 1..%d bytes for bcrypt", maxBcryptPassword)
			}
			h, err := passhash.HashBcrypt(pw, 0)
			if err != nil {
				return "", status.Errorf(codes.Internal, "hash: %v", err)
			}
			return h, nil
		default:
			return "", status.Errorf(codes.InvalidArgument, "scheme %q: want argon2id or bcrypt", req.GetScheme())
		}
	}
	return "", nil
}

// PutMqttUser implements MqttUserService.
func (s *Server) PutMqttUser(ctx context.Context, req *coordinatorv1.PutMqttUserRequest) (*coordinatorv1.PutMqttUserResponse, error) {
	if err := checkName(req.GetUsername()); err != nil {
		return nil, err
	}
	pub, err := rulesOf(req.GetPublish())
	if err != nil {
		return nil, err
	}
	sub, err := rulesOf(req.GetSubscribe())
	if err != nil {
		return nil, err
	}
	hash, err := hashOf(req)
	if err != nil {
		return nil, err
	}
	created, u, err := s.store.PutMqttUser(ctx, store.MqttUser{Username: req.GetUsername(), PasswordHash: hash, Publish: pub, Subscribe: sub})
	if errors.Is(err, store.ErrMqttUserNotFound) {
		return nil, status.Error(codes.InvalidArgument, "a new user needs a password or password_hash")
	}
	if err != nil {
		return nil, statusOf(err)
	}
	s.notify(u.Username)
	return &coordinatorv1.PutMqttUserResponse{Created: created, User: userPB(&u, false)}, nil
}

// DeleteMqttUser implements MqttUserService.
func (s *Server) DeleteMqttUser(ctx context.Context, req *coordinatorv1.DeleteMqttUserRequest) (*coordinatorv1.DeleteMqttUserResponse, error) {
	if err := checkName(req.GetUsername()); err != nil {
		return nil, err
	}
	if err := s.store.DeleteMqttUser(ctx, req.GetUsername()); err != nil {
		return nil, statusOf(err)
	}
	s.notify(req.GetUsername())
	return &coordinatorv1.DeleteMqttUserResponse{}, nil
}

// GetMqttUser implements MqttUserService.
func (s *Server) GetMqttUser(ctx context.Context, req *coordinatorv1.GetMqttUserRequest) (*coordinatorv1.GetMqttUserResponse, error) {
	if err := checkName(req.GetUsername()); err != nil {
		return nil, err
	}
	u, err := s.store.GetMqttUser(ctx, req.GetUsername())
	if err != nil {
		return nil, statusOf(err)
	}
	return &coordinatorv1.GetMqttUserResponse{User: userPB(u, true)}, nil
}

// ListMqttUsers implements MqttUserService.
func (s *Server) ListMqttUsers(ctx context.Context, _ *coordinatorv1.ListMqttUsersRequest) (*coordinatorv1.ListMqttUsersResponse, error) {
	users, err := s.store.ListMqttUsers(ctx)
	if err != nil {
		return nil, statusOf(err)
	}
	resp := &coordinatorv1.ListMqttUsersResponse{}
	for i := range users {
		resp.Users = append(resp.Users, userPB(&users[i], false))
	}
	return resp, nil
}
