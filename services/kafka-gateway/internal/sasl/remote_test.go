package sasl

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// countingCreds is a CredentialService holding alice only, counting lookups per user.
type countingCreds struct {
	coordinatorv1.CredentialServiceClient
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingCreds) GetScramCredential(_ context.Context, req *coordinatorv1.GetScramCredentialRequest, _ ...grpc.CallOption) (*coordinatorv1.GetScramCredentialResponse, error) {
	c.mu.Lock()
	c.calls[req.GetUser()]++
	c.mu.Unlock()
	if req.GetUser() != "alice" {
		return nil, status.Error(codes.NotFound, "no such user")
	}
	return &coordinatorv1.GetScramCredentialResponse{Credential: &coordinatorv1.ScramCredential{
		User: "alice", Mechanism: req.GetMechanism(), Salt: []byte("salt"), Iterations: MinIterations, StoredKey: []byte("st"), ServerKey: []byte("sv")}}, nil
}

// TestRemoteCacheSurvivesMadeUpUsers: lookups of more made-up user names than the
// cache holds (what an unauthenticated flood of SCRAM client-firsts sends) do not push
// a real user's credential out of the cache; Invalidate still drops it.
func TestRemoteCacheSurvivesMadeUpUsers(t *testing.T) {
	cc := &countingCreds{calls: map[string]int{}}
	r := NewRemote(cc)
	ctx := context.Background()
	if _, err := r.Credential(ctx, ScramSHA512, "alice"); err != nil {
		t.Fatal(err)
	}
	for i := range CacheEntries + 10 {
		if _, err := r.Credential(ctx, ScramSHA512, "ghost-"+strconv.Itoa(i)); !errors.Is(err, ErrUnknownUser) {
			t.Fatalf("made-up user %d: %v", i, err)
		}
	}
	if _, err := r.Credential(ctx, ScramSHA512, "alice"); err != nil {
		t.Fatal(err)
	}
	if n := cc.calls["alice"]; n != 1 {
		t.Fatalf("alice looked up %d times, want 1: the flood pushed her out of the cache", n)
	}
	if _, err := r.Credential(ctx, ScramSHA512, "ghost-3"); !errors.Is(err, ErrUnknownUser) || cc.calls["ghost-3"] > 2 {
		t.Fatalf("absence: %v after %d lookups", err, cc.calls["ghost-3"])
	}
	r.Invalidate("alice")
	if _, err := r.Credential(ctx, ScramSHA512, "alice"); err != nil || cc.calls["alice"] != 2 {
		t.Fatalf("after Invalidate: %v, %d lookups, want 2", err, cc.calls["alice"])
	}
}
