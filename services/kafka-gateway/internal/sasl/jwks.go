package sasl

// The JWKS token validator: a signed JWT (RS256/384/512, PS256/384/512, ES256/384/512,
// EdDSA) whose key, named by its kid header, is in the issuer's JSON Web Key Set, with
// an exp in the future (30 s of clock skew allowed), the expected issuer and one of the
// expected audiences when they are configured (Kafka's sasl.oauthbearer.expected.issuer
// and .expected.audience). The key set is fetched from an http(s):// or file:// URL
// (Kafka's sasl.oauthbearer.jwks.endpoint.url), refreshed every RefreshInterval and, at
// most once per 10 s, when a token names a key it does not hold (key rotation). One
// fetch runs at a time, in the background: while it runs, and for 10 s after one that
// failed, tokens are checked against the set held, so a slow or unreachable issuer
// delays only tokens that name a key not held yet.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// JWKS validates signed JWTs against a JSON Web Key Set.
type JWKS struct {
	// URL of the key set: http://, https:// or file://.
	URL string
	// Issuer, when set, must equal the iss claim.
	Issuer string
	// Audiences, when set, must share a value with the aud claim.
	Audiences []string
	// SubClaim names the subject claim ("" = "sub").
	SubClaim string
	// RefreshInterval is how long a fetched key set is used (0 = 1 h).
	RefreshInterval time.Duration
	// Client fetches http(s) URLs (nil = a client with a 10 s timeout).
	Client *http.Client
	// Now is the clock (nil = time.Now).
	Now func() time.Time

	mu       sync.Mutex
	keys     *jose.JSONWebKeySet
	fetched  time.Time     // last successful fetch
	tried    time.Time     // last fetch started
	lastErr  error         // of the last fetch
	fetching chan struct{} // closed when the running fetch ends; nil when none runs
}

// jwksSkew is the clock skew allowed on exp (and nbf, iat).
const jwksSkew = 30 * time.Second

// jwksRefetchMin bounds refetches for unknown key ids, and retries after a failed fetch.
const jwksRefetchMin = 10 * time.Second

// jwksFetchTimeout bounds one fetch of the key set.
const jwksFetchTimeout = 10 * time.Second

var jwtAlgorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

func (j *JWKS) now() time.Time {
	if j.Now != nil {
		return j.Now()
	}
	return time.Now()
}

// keySet returns the key set, fetching it when it is missing or stale, or when
// refetch asks for it (an unknown kid) and the last fetch is old enough. A stale set is
// returned at once while it is fetched anew in the background; a caller without a set,
// or asking for a refetch, waits for the fetch (or until ctx ends).
func (j *JWKS) keySet(ctx context.Context, refetch bool) (*jose.JSONWebKeySet, error) {
	interval := j.RefreshInterval
	if interval <= 0 {
		interval = time.Hour
	}
	j.mu.Lock()
	now := j.now()
	age := now.Sub(j.fetched)
	stale := j.keys == nil || age >= interval || (refetch && age >= jwksRefetchMin)
	if stale && j.keys != nil && now.Sub(j.tried) < jwksRefetchMin {
		stale = false // a fetch just failed: keep serving the last good set
	}
	if !stale {
		ks := j.keys
		j.mu.Unlock()
		return ks, nil
	}
	done := j.fetching
	if done == nil {
		done = make(chan struct{})
		j.fetching, j.tried = done, now
		go j.refresh(done)
	}
	held := j.keys
	j.mu.Unlock()
	if held != nil && !refetch {
		return held, nil
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.keys == nil {
		return nil, j.lastErr
	}
	return j.keys, nil
}

// refresh fetches the key set and closes done.
func (j *JWKS) refresh(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), jwksFetchTimeout)
	defer cancel()
	ks, err := j.fetch(ctx)
	j.mu.Lock()
	if err == nil {
		j.keys, j.fetched = ks, j.now()
	}
	j.lastErr, j.fetching = err, nil
	j.mu.Unlock()
	close(done)
}

func (j *JWKS) fetch(ctx context.Context) (*jose.JSONWebKeySet, error) {
	u, err := url.Parse(j.URL)
	if err != nil {
		return nil, fmt.Errorf("jwks url: %w", err)
	}
	var body []byte
	switch u.Scheme {
	case "file":
		if body, err = os.ReadFile(u.Path); err != nil {
			return nil, fmt.Errorf("jwks: %w", err)
		}
	case "http", "https":
		cl := j.Client
		if cl == nil {
			cl = &http.Client{Timeout: jwksFetchTimeout}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.URL, nil)
		if err != nil {
			return nil, err
		}
		resp, err := cl.Do(req)
		if err != nil {
			return nil, fmt.Errorf("jwks: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("jwks: %s answered %s", j.URL, resp.Status)
		}
		if body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20)); err != nil {
			return nil, fmt.Errorf("jwks: %w", err)
		}
	default:
		return nil, fmt.Errorf("jwks url %q: want http, https or file", j.URL)
	}
	var ks jose.JSONWebKeySet
	if err := json.Unmarshal(body, &ks); err != nil {
		return nil, fmt.Errorf("jwks: not a JSON Web Key Set: %w", err)
	}
	return &ks, nil
}

// Validate implements TokenValidator.
func (j *JWKS) Validate(ctx context.Context, token string) (Token, error) {
	tok, err := jwt.ParseSigned(token, jwtAlgorithms)
	if err != nil {
		return Token{}, fmt.Errorf("not a signed JWT: %w", err)
	}
	if len(tok.Headers) != 1 {
		return Token{}, errors.New("want one signature")
	}
	kid := tok.Headers[0].KeyID
	var keys []jose.JSONWebKey
	for _, refetch := range []bool{false, true} {
		ks, err := j.keySet(ctx, refetch)
		if err != nil {
			return Token{}, err
		}
		if keys = ks.Key(kid); len(keys) > 0 || kid == "" {
			if kid == "" {
				keys = ks.Keys
			}
			break
		}
	}
	if len(keys) == 0 {
		return Token{}, fmt.Errorf("no key %q in the key set", kid)
	}
	var claims jwt.Claims
	var raw json.RawMessage
	verified := false
	for _, k := range keys {
		if err := tok.Claims(k.Public().Key, &claims, &raw); err == nil {
			verified = true
			break
		}
	}
	if !verified {
		return Token{}, errors.New("bad signature")
	}
	if claims.Expiry == nil {
		return Token{}, errors.New("no exp claim")
	}
	if err := claims.ValidateWithLeeway(jwt.Expected{Issuer: j.Issuer, AnyAudience: j.Audiences, Time: j.now()}, jwksSkew); err != nil {
		return Token{}, err
	}
	sub := j.SubClaim
	if sub == "" {
		sub = "sub"
	}
	return claimsFrom(raw, sub, j.now(), jwksSkew)
}
