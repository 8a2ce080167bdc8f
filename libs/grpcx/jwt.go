package grpcx

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWTConfig says which bearer JWTs are accepted. At least one key source is set when
// JWTs are on: an HS256 secret, an RS256/ES256 public key (PEM), or a JWKS URL whose
// RSA and EC keys are selected by the token's "kid".
type JWTConfig struct {
	// HS256SecretFile holds the shared HMAC secret (whitespace at the ends trimmed).
	HS256SecretFile string
	// PublicKeyFile holds a PEM public key (RSA for RS256, EC P-256 for ES256).
	PublicKeyFile string
	// JWKSURL is fetched when a token names a key id not yet known (at most every
	// jwksMinRefresh), and then every jwksMaxAge.
	JWKSURL string
	// Issuer and Audience, when set, must match the token's iss and be in its aud.
	Issuer, Audience string
	// RightsClaim names the claim holding the rights: a space-separated string (as
	// OAuth's "scope") or an array of strings, each VERB:PREFIX. Default "scope".
	RightsClaim string
}

// Enabled reports whether any key source is set.
func (c JWTConfig) Enabled() bool {
	return c.HS256SecretFile != "" || c.PublicKeyFile != "" || c.JWKSURL != ""
}

const (
	jwksMinRefresh = 10 * time.Second
	jwksMaxAge     = 10 * time.Minute
	jwksTimeout    = 5 * time.Second
)

// jwtVerifier checks signed JWTs (RFC 7519) and turns them into principals.
type jwtVerifier struct {
	cfg    JWTConfig
	hmac   []byte
	pub    crypto.PublicKey
	parser *jwt.Parser

	mu       sync.Mutex
	jwks     map[string]crypto.PublicKey
	fetched  time.Time     // last successful fetch
	tried    time.Time     // last fetch started
	lastErr  error         // of the last fetch
	fetching chan struct{} // closed when the running fetch ends; nil when none runs
	http     *http.Client
}

func newJWTVerifier(cfg JWTConfig) (*jwtVerifier, error) {
	if cfg.RightsClaim == "" {
		cfg.RightsClaim = "scope"
	}
	v := &jwtVerifier{cfg: cfg, http: &http.Client{Timeout: jwksTimeout}}
	var methods []string
	if cfg.HS256SecretFile != "" {
		b, err := os.ReadFile(cfg.HS256SecretFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrAuthConfig, err)
		}
		if v.hmac = []byte(strings.TrimSpace(string(b))); len(v.hmac) < 32 {
			return nil, fmt.Errorf("%w: %s: an HS256 secret needs at least 32 bytes", ErrAuthConfig, cfg.HS256SecretFile)
		}
		methods = append(methods, "HS256")
	}
	if cfg.PublicKeyFile != "" {
		b, err := os.ReadFile(cfg.PublicKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrAuthConfig, err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%w: %s holds no PEM block", ErrAuthConfig, cfg.PublicKeyFile)
		}
		if v.pub, err = x509.ParsePKIXPublicKey(blk.Bytes); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrAuthConfig, cfg.PublicKeyFile, err)
		}
		methods = append(methods, "RS256", "ES256")
	}
	if cfg.JWKSURL != "" {
		methods = append(methods, "RS256", "ES256")
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithExpirationRequired(), jwt.WithLeeway(30 * time.Second)}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// verify checks token's signature, expiry, issuer and audience and returns its
// principal (subject, rights from the rights claim).
func (v *jwtVerifier) verify(ctx context.Context, token string) (Principal, error) {
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		switch t.Method.Alg() {
		case "HS256":
			if v.hmac == nil {
				return nil, errors.New("HS256 is not accepted")
			}
			return v.hmac, nil
		}
		kid, _ := t.Header["kid"].(string)
		if v.pub != nil && (kid == "" || v.cfg.JWKSURL == "") {
			return v.pub, nil
		}
		if v.cfg.JWKSURL == "" {
			return nil, fmt.Errorf("%s is not accepted", t.Method.Alg())
		}
		return v.jwksKey(ctx, kid)
	})
	if err != nil {
		return Principal{}, err
	}
	sub, _ := claims["sub"].(string)
	if sub == "" {
		return Principal{}, errors.New("token has no subject")
	}
	var rs []string
	switch c := claims[v.cfg.RightsClaim].(type) {
	case string:
		rs = strings.Fields(c)
	case []any:
		for _, e := range c {
			s, ok := e.(string)
			if !ok {
				return Principal{}, fmt.Errorf("claim %s holds a non-string", v.cfg.RightsClaim)
			}
			rs = append(rs, s)
		}
	}
	rights := make([]Right, 0, len(rs))
	for _, s := range rs {
		// Scopes that are not rights (openid, email...) are someone else's: skip them.
		if r, err := ParseRight(s); err == nil {
			rights = append(rights, r)
		}
	}
	return Principal{Name: sub, Via: "jwt", Rights: rights}, nil
}

// jwksKey returns the JWKS key kid, fetching the set when kid is unknown or the set is
// older than jwksMaxAge, at most once per jwksMinRefresh (failed fetches included). One
// fetch runs at a time, in the background: a held key is returned at once while it
// runs, so a slow or unreachable JWKS endpoint delays only tokens naming a key not held,
// each as long as its context allows.
func (v *jwtVerifier) jwksKey(ctx context.Context, kid string) (crypto.PublicKey, error) {
	v.mu.Lock()
	k, ok := v.jwks[kid]
	now := time.Now()
	due := now.Sub(v.tried) >= jwksMinRefresh && (!ok || now.Sub(v.fetched) >= jwksMaxAge)
	if !due {
		v.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("no JWKS key %q", kid)
		}
		return k, nil
	}
	done := v.fetching
	if done == nil {
		done = make(chan struct{})
		v.fetching, v.tried = done, now
		go v.refresh(done)
	}
	v.mu.Unlock()
	if ok {
		return k, nil
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if k, ok := v.jwks[kid]; ok {
		return k, nil
	}
	if v.lastErr != nil {
		return nil, v.lastErr
	}
	return nil, fmt.Errorf("no JWKS key %q", kid)
}

// refresh fetches the key set and closes done.
func (v *jwtVerifier) refresh(done chan struct{}) {
	keys, err := v.fetchJWKS(context.Background())
	v.mu.Lock()
	if err == nil {
		v.jwks, v.fetched = keys, time.Now()
	}
	v.lastErr, v.fetching = err, nil
	v.mu.Unlock()
	close(done)
}

// fetchJWKS reads the key set (RFC 7517): RSA and EC P-256 signing keys, by kid.
func (v *jwtVerifier) fetchJWKS(ctx context.Context) (map[string]crypto.PublicKey, error) {
	ctx, cancel := context.WithTimeout(ctx, jwksTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.cfg.JWKSURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := v.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jwks: %s answered %s", v.cfg.JWKSURL, resp.Status)
	}
	var set struct {
		Keys []struct {
			Kty, Kid, Use, Crv, N, E, X, Y string
		} `json:"keys"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	keys := map[string]crypto.PublicKey{}
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		switch k.Kty {
		case "RSA":
			n, err1 := b64int(k.N)
			e, err2 := b64int(k.E)
			if err1 != nil || err2 != nil || !e.IsInt64() {
				continue
			}
			keys[k.Kid] = &rsa.PublicKey{N: n, E: int(e.Int64())}
		case "EC":
			if k.Crv != "P-256" {
				continue
			}
			x, err1 := base64.RawURLEncoding.DecodeString(k.X)
			y, err2 := base64.RawURLEncoding.DecodeString(k.Y)
			if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
				continue
			}
			pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
			if err != nil {
				continue
			}
			keys[k.Kid] = pub
		}
	}
	return keys, nil
}

func b64int(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	return new(big.Int).SetBytes(b), nil
}
