package sasl

// SCRAM credentials kept by the coordinator (CredentialService, Postgres), cached per
// user and mechanism for CacheTTL and at most CacheEntries entries in libs/authcache
// (absences held apart, so SCRAM or PLAIN attempts for made-up user names never push
// out the credentials of real users). A credential change on any replica
// (AlterUserScramCredentials) reaches every gateway at once through
// natsx.CredentialsChangedSubject (Invalidate); the TTL bounds how stale an entry can
// be when that notice is lost.

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/authcache"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// Cache bounds of Remote.
const (
	// CacheTTL is how long a looked-up credential (or its absence) is reused.
	CacheTTL = 10 * time.Second
	// CacheEntries bounds the cached credentials, and apart the cached absences; past
	// it that part of the cache is emptied.
	CacheEntries = 10000
	// lookupTimeout bounds one coordinator lookup.
	lookupTimeout = 5 * time.Second
)

// Remote is a Credentials source over the coordinator's CredentialService.
type Remote struct {
	client coordinatorv1.CredentialServiceClient
	cache  *authcache.Cache[remoteKey, Credential]
}

type remoteKey struct{ mech, user string }

// NewRemote returns a cached source over client.
func NewRemote(client coordinatorv1.CredentialServiceClient) *Remote {
	return &Remote{client: client, cache: authcache.New[remoteKey, Credential](CacheTTL, CacheEntries)}
}

// Credential implements Credentials.
func (r *Remote) Credential(ctx context.Context, mechanism, user string) (Credential, error) {
	c, found, err := r.cache.Get(ctx, remoteKey{mechanism, user}, func(ctx context.Context) (Credential, bool, error) {
		ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		defer cancel()
		resp, err := r.client.GetScramCredential(ctx, &coordinatorv1.GetScramCredentialRequest{User: user, Mechanism: mechanism})
		switch status.Code(err) {
		case codes.OK:
			c := resp.GetCredential()
			return Credential{Salt: c.GetSalt(), Iterations: int(c.GetIterations()), StoredKey: c.GetStoredKey(), ServerKey: c.GetServerKey()}, true, nil
		case codes.NotFound:
			return Credential{}, false, nil
		}
		return Credential{}, false, ErrUnavailable
	})
	if err != nil {
		return Credential{}, err
	}
	if !found {
		return Credential{}, ErrUnknownUser
	}
	return c, nil
}

// Invalidate drops user's cached credentials ("" drops all). Called on
// natsx.CredentialsChangedSubject notices and after a NATS reconnect.
func (r *Remote) Invalidate(user string) {
	if user == "" {
		r.cache.Invalidate()
		return
	}
	r.cache.Invalidate(remoteKey{ScramSHA256, user}, remoteKey{ScramSHA512, user})
}
