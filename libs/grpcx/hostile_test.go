package grpcx

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/tributary/tributary/libs/tlsx/tlsxtest"
)

// TestAuthHostileCallers: malformed authorization metadata, a JWT signed for another
// algorithm than the configured key's (HS256 keyed with the RSA public key's PEM, the
// classic confusion), alg none, an expired client certificate, the reserved namespace
// and another prefix than the token's: each is UNAUTHENTICATED or PERMISSION_DENIED
// (an expired certificate fails the handshake) and no call reaches the service.
func TestAuthHostileCallers(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	e := startSecure(t, func(_ *tlsxtest.CA, s *ServerSecurity) {
		s.JWT = JWTConfig{PublicKeyFile: writeFile(t, "pub.pem", string(pubPEM))}
	})
	c := e.dial(t, DialSecurity{CAFile: e.ca.CertFile})
	sign := func(m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(m, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	claims := jwt.MapClaims{"sub": "svc", "scope": "*:*", "exp": time.Now().Add(time.Hour).Unix()}
	if err := read(c, withToken(sign(jwt.SigningMethodRS256, rsaKey, claims)), "kafka.orders"); err != nil {
		t.Fatalf("RS256 token of the configured key: %v", err)
	}

	before := fakeCalls.Load()
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	md := func(kv ...string) context.Context {
		return metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...))
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		ch   string
		want codes.Code
	}{
		{"HS256 keyed with the public key PEM", withToken(sign(jwt.SigningMethodHS256, pubPEM, claims)), "kafka.orders", codes.Unauthenticated},
		{"ES256 by another key", withToken(sign(jwt.SigningMethodES256, ecKey, claims)), "kafka.orders", codes.Unauthenticated},
		{"alg none", withToken(sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims)), "kafka.orders", codes.Unauthenticated},
		{"RS256 expired past the leeway", withToken(sign(jwt.SigningMethodRS256, rsaKey, jwt.MapClaims{"sub": "svc", "scope": "*:*", "exp": time.Now().Add(-time.Minute).Unix()})), "kafka.orders", codes.Unauthenticated},
		{"RS256 not valid yet", withToken(sign(jwt.SigningMethodRS256, rsaKey, jwt.MapClaims{"sub": "svc", "scope": "*:*", "exp": time.Now().Add(time.Hour).Unix(), "nbf": time.Now().Add(time.Hour).Unix()})), "kafka.orders", codes.Unauthenticated},
		{"a JWT with its signature cut", withToken(sign(jwt.SigningMethodRS256, rsaKey, claims)[:40]), "kafka.orders", codes.Unauthenticated},
		{"Bearer without a token", md("authorization", "Bearer"), "kafka.orders", codes.Unauthenticated},
		{"Bearer and a blank", md("authorization", "Bearer "), "kafka.orders", codes.Unauthenticated},
		{"two blanks before the token", md("authorization", "Bearer  root-secret"), "kafka.orders", codes.Unauthenticated},
		{"token with a suffix", md("authorization", "Bearer root-secret x"), "kafka.orders", codes.Unauthenticated},
		{"token without a scheme", md("authorization", "root-secret"), "kafka.orders", codes.Unauthenticated},
		{"a bad header before a good one", md("authorization", "Bearer nope", "authorization", "Bearer root-secret"), "kafka.orders", codes.Unauthenticated},
		{"root token on the reserved namespace", withToken("root-secret"), "_offsets", codes.PermissionDenied},
		{"root token on a bare _", withToken("root-secret"), "_", codes.PermissionDenied},
		{"root JWT on the reserved namespace", withToken(sign(jwt.SigningMethodRS256, rsaKey, claims)), "_x", codes.PermissionDenied},
		{"reader token on another prefix", withToken("reader-secret"), "kafka.payments", codes.PermissionDenied},
		{"reader token on a shorter name", withToken("reader-secret"), "kafka.order", codes.PermissionDenied},
		{"reader token on the cluster", withToken("reader-secret"), "", codes.PermissionDenied},
	} {
		wantCode(t, tc.name, read(c, tc.ctx, tc.ch), tc.want)
		wantCode(t, tc.name+" (append)", appendTo(c, tc.ctx, tc.ch), tc.want)
	}
	if got := fakeCalls.Load() - before; got != 0 {
		t.Fatalf("%d refused calls reached the service", got)
	}

	// An expired certificate of the right CA, named as a service, fails the handshake.
	xCert, xKey := e.ca.IssueExpired(t, "gw-expired", "kafka-gateway")
	xc := e.dial(t, DialSecurity{CAFile: e.ca.CertFile, CertFile: xCert, KeyFile: xKey})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wantCode(t, "expired service certificate", appendTo(xc, ctx, "kafka.x"), codes.Unavailable)
	if got := fakeCalls.Load() - before; got != 0 {
		t.Fatalf("%d refused calls reached the service", got)
	}
}

// fakeCalls counts the calls fakeStorage served.
var fakeCalls atomic.Int64

// TestJWKSSlowEndpoint: when the key set is due for a refresh and the JWKS endpoint is
// slow (or down), tokens signed by a held key are verified at once, one fetch runs for
// all of them, and a token naming a key not held waits only as long as its context.
func TestJWKSSlowEndpoint(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	var slow atomic.Bool
	var fetches atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		fetches.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{"kty": "RSA", "kid": "r1",
			"n": base64.RawURLEncoding.EncodeToString(rsaKey.N.Bytes()),
			"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(rsaKey.E)).Bytes())}}})
	}))
	defer srv.Close()
	defer close(release)
	v, err := newJWTVerifier(JWTConfig{JWKSURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "svc", "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = kid
		s, err := tok.SignedString(rsaKey)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := sign("r1")
	if _, err := v.verify(context.Background(), good); err != nil {
		t.Fatal(err)
	}
	slow.Store(true)
	v.mu.Lock()
	v.fetched, v.tried = time.Now().Add(-time.Hour), time.Now().Add(-time.Hour) // due for a refresh
	v.mu.Unlock()
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := v.verify(context.Background(), good); err != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d tokens of a held key refused while the endpoint is slow", n)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("tokens of a held key waited %v for a slow endpoint", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := v.verify(ctx, sign("r9")); err == nil {
		t.Fatal("token of a key not held accepted")
	}
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d fetches completed while the endpoint was slow, want the first only", n)
	}
}
