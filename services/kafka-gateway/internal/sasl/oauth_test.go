package sasl

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

func unsecuredToken(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(claims)) + "."
}

func oauthMsg(token string) []byte { return []byte("n,,\x01auth=Bearer " + token + "\x01\x01") }

func TestOAuthBearerUnsecured(t *testing.T) {
	m := NewOAuthBearer(Unsecured{})
	exp := time.Now().Add(time.Hour).Unix()
	good := unsecuredToken(`{"sub":"alice","exp":` + jsonNum(exp) + `}`)
	ex := m.Start()
	if out, done, err := ex.Step(context.Background(), oauthMsg(good)); err != nil || !done || len(out) != 0 {
		t.Fatalf("good token: %q %v %v", out, done, err)
	}
	if ex.Principal() != "User:alice" || ex.Expiry().Unix() != exp {
		t.Fatalf("principal %s expiry %v", ex.Principal(), ex.Expiry())
	}
	for name, tok := range map[string]string{
		"expired": unsecuredToken(`{"sub":"alice","exp":` + jsonNum(time.Now().Add(-time.Minute).Unix()) + `}`),
		"no sub":  unsecuredToken(`{"exp":` + jsonNum(exp) + `}`),
		"no exp":  unsecuredToken(`{"sub":"alice"}`),
		"signed":  unsecuredToken(`{"sub":"alice","exp":1}`) + "c2ln",
		"alg":     base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256"}`)) + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"a","exp":9999999999}`)) + ".",
		"garbage": "x",
	} {
		ex := m.Start()
		out, done, err := ex.Step(context.Background(), oauthMsg(tok))
		if err != nil || done || string(out) != string(invalidToken) {
			t.Errorf("%s: first step %q %v %v, want the invalid_token challenge", name, out, done, err)
			continue
		}
		if _, _, err := ex.Step(context.Background(), []byte("\x01")); !errors.Is(err, ErrAuthFailed) {
			t.Errorf("%s: after the challenge: %v, want failure", name, err)
		}
	}
	for _, msg := range []string{"", "n,,", "auth=Bearer x\x01\x01", "n,,\x01auth=Basic x\x01\x01", "n,,\x01\x01", "p,,\x01auth=Bearer x\x01\x01"} {
		if _, _, err := m.Start().Step(context.Background(), []byte(msg)); !errors.Is(err, ErrAuthFailed) {
			t.Errorf("message %q: %v, want failure", msg, err)
		}
	}
	// An authorization id other than the subject is refused.
	ex = m.Start()
	if out, _, _ := ex.Step(context.Background(), []byte("n,a=bob,\x01auth=Bearer "+good+"\x01\x01")); string(out) != string(invalidToken) {
		t.Errorf("authzid bob for alice's token: %q", out)
	}
}

func jsonNum(n int64) string { b, _ := json.Marshal(n); return string(b) }

type keyServer struct {
	mu   sync.Mutex
	keys jose.JSONWebKeySet
	hits int
}

func (k *keyServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.hits++
	_ = json.NewEncoder(w).Encode(k.keys)
}

func sign(t *testing.T, key any, kid string, alg jose.SignatureAlgorithm, c jwt.Claims) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", kid).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestJWKSValidator(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ks := &keyServer{keys: jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &rsaKey.PublicKey, KeyID: "r1", Algorithm: "RS256", Use: "sig"},
	}}}
	srv := httptest.NewServer(ks)
	defer srv.Close()
	now := time.Now()
	clock := now
	v := &JWKS{URL: srv.URL, Issuer: "https://issuer.example", Audiences: []string{"kafka"}, Now: func() time.Time { return clock }}
	claims := func(sub, iss string, aud []string, exp time.Time) jwt.Claims {
		return jwt.Claims{Subject: sub, Issuer: iss, Audience: aud, Expiry: jwt.NewNumericDate(exp), IssuedAt: jwt.NewNumericDate(now)}
	}
	good := sign(t, rsaKey, "r1", jose.RS256, claims("alice", "https://issuer.example", []string{"kafka", "x"}, now.Add(time.Hour)))
	tok, err := v.Validate(context.Background(), good)
	if err != nil || tok.Subject != "alice" {
		t.Fatalf("good token: %+v %v", tok, err)
	}
	for name, bad := range map[string]string{
		"issuer":    sign(t, rsaKey, "r1", jose.RS256, claims("alice", "https://evil.example", []string{"kafka"}, now.Add(time.Hour))),
		"audience":  sign(t, rsaKey, "r1", jose.RS256, claims("alice", "https://issuer.example", []string{"other"}, now.Add(time.Hour))),
		"expired":   sign(t, rsaKey, "r1", jose.RS256, claims("alice", "https://issuer.example", []string{"kafka"}, now.Add(-time.Hour))),
		"other key": sign(t, otherKey, "r1", jose.RS256, claims("alice", "https://issuer.example", []string{"kafka"}, now.Add(time.Hour))),
		"no sub":    sign(t, rsaKey, "r1", jose.RS256, claims("", "https://issuer.example", []string{"kafka"}, now.Add(time.Hour))),
		"unsecured": unsecuredToken(`{"sub":"alice","exp":9999999999,"iss":"https://issuer.example","aud":"kafka"}`),
	} {
		if _, err := v.Validate(context.Background(), bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A rotated key (new kid) is fetched once the set is 10 s old.
	rotated := sign(t, ecKey, "e2", jose.ES256, claims("bob", "https://issuer.example", []string{"kafka"}, now.Add(time.Hour)))
	ks.mu.Lock()
	ks.keys.Keys = append(ks.keys.Keys, jose.JSONWebKey{Key: &ecKey.PublicKey, KeyID: "e2", Algorithm: "ES256", Use: "sig"})
	ks.mu.Unlock()
	if _, err := v.Validate(context.Background(), rotated); err == nil {
		t.Error("unknown kid accepted before a refetch was due")
	}
	clock = now.Add(11 * time.Second)
	if tok, err := v.Validate(context.Background(), rotated); err != nil || tok.Subject != "bob" {
		t.Fatalf("rotated key: %+v %v", tok, err)
	}
	if ks.hits != 2 {
		t.Errorf("key set fetched %d times, want 2", ks.hits)
	}
}

// TestJWKSSlowIssuer: when the key set is due for a refresh and the issuer is slow (or
// down), tokens signed by a held key are still checked at once against the held set,
// one fetch runs for all of them, and a token naming a key not held waits for that
// fetch only as long as its context allows.
func TestJWKSSlowIssuer(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ks := &keyServer{keys: jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &rsaKey.PublicKey, KeyID: "r1", Algorithm: "RS256", Use: "sig"},
	}}}
	release := make(chan struct{})
	var slow atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		ks.ServeHTTP(w, r)
	}))
	defer srv.Close()
	defer close(release)
	now := time.Now()
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	v := &JWKS{URL: srv.URL, Now: func() time.Time { return time.Unix(0, clock.Load()) }}
	claims := jwt.Claims{Subject: "alice", Expiry: jwt.NewNumericDate(now.Add(3 * time.Hour))}
	good := sign(t, rsaKey, "r1", jose.RS256, claims)
	if _, err := v.Validate(context.Background(), good); err != nil {
		t.Fatal(err)
	}

	slow.Store(true)
	clock.Store(now.Add(2 * time.Hour).UnixNano()) // past the 1 h refresh interval
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := v.Validate(context.Background(), good)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("token of a held key while the issuer is slow: %v", err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("tokens of a held key waited %v for a slow issuer", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := v.Validate(ctx, sign(t, rsaKey, "r9", jose.RS256, claims)); err == nil {
		t.Fatal("token of a key not held accepted")
	}
	ks.mu.Lock()
	hits := ks.hits
	ks.mu.Unlock()
	if hits > 1 {
		t.Fatalf("%d fetches completed while the issuer was slow, want the first only", hits)
	}
}
