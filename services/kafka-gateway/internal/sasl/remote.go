package sasl

// SCRAM credentials kept by the coordinator (CredentialService, Postgres), cached per
// user and mechanism for CacheTTL and at most CacheEntries entries. Absences are held
// apart, under the same bound: SCRAM or PLAIN attempts for made-up user names, which
// anyone may send before authenticating, fill and empty only that part, never push out
// the credentials of real users. A credential change
// on any replica (AlterUserScramCredentials) reaches every gateway at once through
// natsx.CredentialsChangedSubject (Invalidate); the TTL bounds how stale an entry can
// be when that notice is lost.

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	now    func() time.Time

	mu      sync.Mutex
	entries map[remoteKey]remoteEntry // found credentials
	absent  map[remoteKey]time.Time   // users without one, by when looked up
	gen     uint64                    // bumped by Invalidate: a lookup started before it is not cached
}

type remoteKey struct{ mech, user string }

type remoteEntry struct {
	cred  Credential
	found bool
	at    time.Time
}

// NewRemote returns a cached source over client.
func NewRemote(client coordinatorv1.CredentialServiceClient) *Remote {
	return &Remote{client: client, now: time.Now, entries: map[remoteKey]remoteEntry{}, absent: map[remoteKey]time.Time{}}
}

// Credential implements Credentials.
func (r *Remote) Credential(ctx context.Context, mechanism, user string) (Credential, error) {
	k := remoteKey{mechanism, user}
	r.mu.Lock()
	e, ok := r.entries[k]
	at, isAbsent := r.absent[k]
	gen := r.gen
	r.mu.Unlock()
	if ok && r.now().Sub(e.at) < CacheTTL {
		return e.cred, nil
	}
	if isAbsent && r.now().Sub(at) < CacheTTL {
		return Credential{}, ErrUnknownUser
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	resp, err := r.client.GetScramCredential(ctx, &coordinatorv1.GetScramCredentialRequest{User: user, Mechanism: mechanism})
	switch status.Code(err) {
	case codes.OK:
		c := resp.GetCredential()
		e = remoteEntry{found: true, cred: Credential{Salt: c.GetSalt(), Iterations: int(c.GetIterations()), StoredKey: c.GetStoredKey(), ServerKey: c.GetServerKey()}}
	case codes.NotFound:
		e = remoteEntry{}
	default:
		return Credential{}, ErrUnavailable
	}
	e.at = r.now()
	r.mu.Lock()
	if r.gen == gen {
		if e.found {
			if len(r.entries) >= CacheEntries {
				r.entries = map[remoteKey]remoteEntry{}
			}
			r.entries[k] = e
			delete(r.absent, k)
		} else {
			if len(r.absent) >= CacheEntries {
				r.absent = map[remoteKey]time.Time{}
			}
			r.absent[k] = e.at
			delete(r.entries, k)
		}
	}
	r.mu.Unlock()
	if !e.found {
		return Credential{}, ErrUnknownUser
	}
	return e.cred, nil
}

// Invalidate drops user's cached credentials ("" drops all). Called on
// natsx.CredentialsChangedSubject notices and after a NATS reconnect.
func (r *Remote) Invalidate(user string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	if user == "" {
		r.entries, r.absent = map[remoteKey]remoteEntry{}, map[remoteKey]time.Time{}
		return
	}
	for _, mech := range []string{ScramSHA256, ScramSHA512} {
		delete(r.entries, remoteKey{mech, user})
		delete(r.absent, remoteKey{mech, user})
	}
}
