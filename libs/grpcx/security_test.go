package grpcx

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/tlsx"
	"github.com/tributary/tributary/libs/tlsx/tlsxtest"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// fakeStorage answers Read and Append with empty responses (counted in fakeCalls) and
// echoes the messages of AppendStream.
type fakeStorage struct {
	storagev1.UnimplementedStorageServiceServer
}

func (fakeStorage) Read(context.Context, *storagev1.ReadRequest) (*storagev1.ReadResponse, error) {
	fakeCalls.Add(1)
	return &storagev1.ReadResponse{}, nil
}

func (fakeStorage) Append(context.Context, *storagev1.AppendRequest) (*storagev1.AppendResponse, error) {
	fakeCalls.Add(1)
	return &storagev1.AppendResponse{}, nil
}

func (fakeStorage) AppendStream(st storagev1.StorageService_AppendStreamServer) error {
	for {
		m, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := st.Send(&storagev1.AppendStreamResponse{Id: m.Id}); err != nil {
			return err
		}
	}
}

var testRules = Rules{
	storagev1.StorageService_Read_FullMethodName: {Verb: VerbRead, Resources: func(m any) []string {
		return []string{m.(*storagev1.ReadRequest).GetChannel()}
	}},
	storagev1.StorageService_Append_FullMethodName: {Verb: VerbAppend, Resources: func(m any) []string {
		return []string{m.(*storagev1.AppendRequest).GetChannel()}
	}},
	storagev1.StorageService_AppendStream_FullMethodName: {Verb: VerbAppend, Resources: func(m any) []string {
		var out []string
		for _, c := range m.(*storagev1.AppendStreamRequest).GetChannels() {
			out = append(out, c.GetChannel())
		}
		return out
	}},
}

type secEnv struct {
	ca, other *tlsxtest.CA
	addr      string
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startSecure serves fakeStorage with auth required; sec completes the settings.
func startSecure(t *testing.T, sec func(ca *tlsxtest.CA, s *ServerSecurity)) *secEnv {
	t.Helper()
	e := &secEnv{ca: tlsxtest.NewCA(t), other: tlsxtest.NewCA(t)}
	cert, key := e.ca.Issue(t, "server", "storage-core")
	s := ServerSecurity{
		TLS:          tlsx.Server{CertFile: cert, KeyFile: key, ClientCAFile: e.ca.CertFile},
		Auth:         AuthRequired,
		ServiceNames: DefaultServiceNames,
		CredentialsFile: writeFile(t, "creds", `# test credentials
token reader-secret reader read:kafka.orders
token root-secret root *:*   # everything
cert alice read:gcp. append:gcp.a
`),
	}
	if sec != nil {
		sec(e.ca, &s)
	}
	opts, err := s.ServerOptions(testRules, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(zaptest.NewLogger(t), opts...)
	storagev1.RegisterStorageServiceServer(srv, fakeStorage{})
	RegisterStandard(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	e.addr = ln.Addr().String()
	return e
}

func (e *secEnv) dial(t *testing.T, d DialSecurity) storagev1.StorageServiceClient {
	t.Helper()
	opts, err := d.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	cc, err := Dial(e.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return storagev1.NewStorageServiceClient(cc)
}

func withToken(tok string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: %v (%v), want %v", what, got, err, want)
	}
}

func read(c storagev1.StorageServiceClient, ctx context.Context, ch string) error {
	_, err := c.Read(ctx, &storagev1.ReadRequest{Channel: ch})
	return err
}

func appendTo(c storagev1.StorageServiceClient, ctx context.Context, ch string) error {
	_, err := c.Append(ctx, &storagev1.AppendRequest{Channel: ch})
	return err
}

func TestAuthRefusesPlaintextAndAnonymous(t *testing.T) {
	e := startSecure(t, nil)
	// Plaintext on the TLS port: answered, UNAUTHENTICATED, even with a valid token.
	cc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	plain := storagev1.NewStorageServiceClient(cc)
	wantCode(t, "plaintext", read(plain, context.Background(), "kafka.orders"), codes.Unauthenticated)
	wantCode(t, "plaintext with token", read(plain, withToken("root-secret"), "kafka.orders"), codes.Unauthenticated)
	_, err = healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	wantCode(t, "plaintext health", err, codes.Unauthenticated)

	anon := e.dial(t, DialSecurity{CAFile: e.ca.CertFile, ServerName: "localhost"})
	wantCode(t, "TLS, no credentials", read(anon, context.Background(), "kafka.orders"), codes.Unauthenticated)
	wantCode(t, "unknown token", read(anon, withToken("nope"), "kafka.orders"), codes.Unauthenticated)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Basic cm9vdA==")
	wantCode(t, "basic auth", read(anon, ctx, "kafka.orders"), codes.Unauthenticated)
}

func TestAuthStaticTokenRights(t *testing.T) {
	e := startSecure(t, nil)
	c := e.dial(t, DialSecurity{CAFile: e.ca.CertFile})
	r := withToken("reader-secret")
	wantCode(t, "reader Read kafka.orders", read(c, r, "kafka.orders"), codes.OK)
	wantCode(t, "reader Read kafka.orders~3", read(c, r, "kafka.orders~3"), codes.OK)
	wantCode(t, "reader Append kafka.orders", appendTo(c, r, "kafka.orders"), codes.PermissionDenied)
	wantCode(t, "reader Read kafka.other", read(c, r, "kafka.other"), codes.PermissionDenied)
	// A method without a rule needs admin on the cluster.
	_, err := c.DeleteChannel(r, &storagev1.DeleteChannelRequest{Name: "kafka.orders"})
	wantCode(t, "reader DeleteChannel", err, codes.PermissionDenied)

	root := withToken("root-secret")
	wantCode(t, "root Append", appendTo(c, root, "kafka.anything"), codes.OK)
	_, err = c.DeleteChannel(root, &storagev1.DeleteChannelRequest{Name: "kafka.orders"})
	wantCode(t, "root DeleteChannel (past auth, unimplemented here)", err, codes.Unimplemented)
	// The reserved namespace is nobody's.
	wantCode(t, "root Read _system", read(c, root, "_TRIBUTARY_x"), codes.PermissionDenied)

	// A token file on the dial side is sent with every call.
	tc := e.dial(t, DialSecurity{CAFile: e.ca.CertFile, TokenFile: writeFile(t, "tok", "reader-secret\n")})
	wantCode(t, "token file Read", read(tc, context.Background(), "kafka.orders"), codes.OK)
	wantCode(t, "token file Append", appendTo(tc, context.Background(), "kafka.orders"), codes.PermissionDenied)
}

func TestAuthCertificates(t *testing.T) {
	e := startSecure(t, nil)
	gwCert, gwKey := e.ca.Issue(t, "gw", "kafka-gateway")
	gw := e.dial(t, DialSecurity{CAFile: e.ca.CertFile, CertFile: gwCert, KeyFile: gwKey})
	wantCode(t, "service Append", appendTo(gw, context.Background(), "kafka.x"), codes.OK)
	wantCode(t, "service Read _", read(gw, context.Background(), "_KAFKA_x"), codes.PermissionDenied)

	aCert, aKey := e.ca.Issue(t, "alice", "alice")
	alice := e.dial(t, DialSecurity{CAFile: e.ca.CertFile, CertFile: aCert, KeyFile: aKey})
	wantCode(t, "alice Read gcp.t", read(alice, context.Background(), "gcp.t"), codes.OK)
	wantCode(t, "alice Append gcp.a", appendTo(alice, context.Background(), "gcp.a"), codes.OK)
	wantCode(t, "alice Append gcp.b", appendTo(alice, context.Background(), "gcp.b"), codes.PermissionDenied)
	// A token wins over the certificate it came with.
	wantCode(t, "alice with reader token", read(alice, withToken("reader-secret"), "gcp.t"), codes.PermissionDenied)

	bob, bobKey := e.ca.Issue(t, "bob", "bob")
	bc := e.dial(t, DialSecurity{CAFile: e.ca.CertFile, CertFile: bob, KeyFile: bobKey})
	wantCode(t, "bob (no rights) Read", read(bc, context.Background(), "gcp.t"), codes.PermissionDenied)

	// A certificate of another CA, even named as a service, fails the handshake.
	oCert, oKey := e.other.Issue(t, "gw", "kafka-gateway")
	oc := e.dial(t, DialSecurity{CAFile: e.ca.CertFile, CertFile: oCert, KeyFile: oKey})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wantCode(t, "foreign CA", appendTo(oc, ctx, "kafka.x"), codes.Unavailable)
}

func TestAuthStreamMessages(t *testing.T) {
	e := startSecure(t, nil)
	c := e.dial(t, DialSecurity{CAFile: e.ca.CertFile, TokenFile: writeFile(t, "tok", "root-secret")})
	st, err := c.AppendStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&storagev1.AppendStreamRequest{Id: 1, Channels: []*storagev1.ChannelBatches{{Channel: "kafka.a"}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.Id != 1 {
		t.Fatalf("first message: %v %v", m, err)
	}
	_ = st.Send(&storagev1.AppendStreamRequest{Id: 2, Channels: []*storagev1.ChannelBatches{{Channel: "kafka.a"}, {Channel: "_x"}}})
	_, err = st.Recv()
	wantCode(t, "stream message to _x", err, codes.PermissionDenied)
}

func TestAuthJWT(t *testing.T) {
	secret := strings.Repeat("s", 40)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPoint, _ := ecKey.PublicKey.Bytes()
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{
			{"kty": "RSA", "kid": "r1", "use": "sig", "n": base64.RawURLEncoding.EncodeToString(rsaKey.N.Bytes()),
				"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(rsaKey.E)).Bytes())},
			{"kty": "EC", "kid": "e1", "crv": "P-256", "x": base64.RawURLEncoding.EncodeToString(ecPoint[1:33]),
				"y": base64.RawURLEncoding.EncodeToString(ecPoint[33:])},
		}})
	}))
	defer jwks.Close()
	e := startSecure(t, func(_ *tlsxtest.CA, s *ServerSecurity) {
		s.JWT = JWTConfig{HS256SecretFile: writeFile(t, "hs", secret+"\n"), JWKSURL: jwks.URL, Issuer: "https://idp", Audience: "tributary"}
	})
	c := e.dial(t, DialSecurity{CAFile: e.ca.CertFile})
	good := jwt.MapClaims{"sub": "svc-a", "iss": "https://idp", "aud": []string{"tributary"}, "scope": "openid read:kafka.",
		"exp": time.Now().Add(time.Hour).Unix()}
	sign := func(m jwt.SigningMethod, kid string, key any, claims jwt.MapClaims) string {
		tok := jwt.NewWithClaims(m, claims)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	with := func(k string, v any) jwt.MapClaims {
		m := jwt.MapClaims{}
		for a, b := range good {
			m[a] = b
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name string
		tok  string
		want codes.Code
	}{
		{"HS256", sign(jwt.SigningMethodHS256, "", []byte(secret), good), codes.OK},
		{"RS256 from JWKS", sign(jwt.SigningMethodRS256, "r1", rsaKey, good), codes.OK},
		{"ES256 from JWKS", sign(jwt.SigningMethodES256, "e1", ecKey, good), codes.OK},
		{"array rights", sign(jwt.SigningMethodHS256, "", []byte(secret), with("scope", []string{"read:kafka.o"})), codes.OK},
		{"no rights", sign(jwt.SigningMethodHS256, "", []byte(secret), with("scope", nil)), codes.PermissionDenied},
		{"wrong HS secret", sign(jwt.SigningMethodHS256, "", []byte(strings.Repeat("x", 40)), good), codes.Unauthenticated},
		{"unknown kid", sign(jwt.SigningMethodRS256, "r2", rsaKey, good), codes.Unauthenticated},
		{"wrong issuer", sign(jwt.SigningMethodHS256, "", []byte(secret), with("iss", "https://evil")), codes.Unauthenticated},
		{"wrong audience", sign(jwt.SigningMethodHS256, "", []byte(secret), with("aud", "other")), codes.Unauthenticated},
		{"expired", sign(jwt.SigningMethodHS256, "", []byte(secret), with("exp", time.Now().Add(-time.Hour).Unix())), codes.Unauthenticated},
		{"no expiry", sign(jwt.SigningMethodHS256, "", []byte(secret), with("exp", nil)), codes.Unauthenticated},
		{"no subject", sign(jwt.SigningMethodHS256, "", []byte(secret), with("sub", nil)), codes.Unauthenticated},
		{"alg none", sign(jwt.SigningMethodNone, "", jwt.UnsafeAllowNoneSignatureType, good), codes.Unauthenticated},
	} {
		wantCode(t, tc.name, read(c, withToken(tc.tok), "kafka.orders"), tc.want)
	}
	wantCode(t, "JWT read-only Append", appendTo(c, withToken(sign(jwt.SigningMethodHS256, "", []byte(secret), good)), "kafka.orders"), codes.PermissionDenied)
}

// Without TLS and auth nothing is added to the server: no interceptor runs.
func TestServerOptionsOff(t *testing.T) {
	opts, err := ServerSecurity{}.ServerOptions(testRules, zaptest.NewLogger(t))
	if err != nil || opts != nil {
		t.Fatalf("zero ServerSecurity: %v %v, want no options", opts, err)
	}
	dopts, err := DialSecurity{}.DialOptions()
	if err != nil || dopts != nil {
		t.Fatalf("zero DialSecurity: %v %v, want no options", dopts, err)
	}
	if _, err := (DialSecurity{TokenFile: "/x"}).DialOptions(); !errors.Is(err, ErrAuthConfig) {
		t.Errorf("token without TLS: %v", err)
	}
	for name, s := range map[string]ServerSecurity{
		"auth without TLS": {Auth: AuthRequired, CredentialsFile: "/x"},
		"unknown mode":     {Auth: "maybe"},
	} {
		if err := s.Validate(); !errors.Is(err, ErrAuthConfig) {
			t.Errorf("%s: %v, want ErrAuthConfig", name, err)
		}
	}
}

// TLS without auth: mTLS only, and no interceptor (a caller with a valid certificate
// may do anything, one without is refused at the handshake).
func TestTLSWithoutAuth(t *testing.T) {
	ca := tlsxtest.NewCA(t)
	cert, key := ca.Issue(t, "server", "storage-core")
	s := ServerSecurity{TLS: tlsx.Server{CertFile: cert, KeyFile: key, ClientCAFile: ca.CertFile, ClientAuth: tlsx.ClientAuthRequired}}
	opts, err := s.ServerOptions(testRules, zaptest.NewLogger(t))
	if err != nil || len(opts) != 1 {
		t.Fatalf("options %d, %v: want the credentials only", len(opts), err)
	}
	srv := NewServer(zaptest.NewLogger(t), opts...)
	storagev1.RegisterStorageServiceServer(srv, fakeStorage{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	e := &secEnv{addr: ln.Addr().String()}
	ccert, ckey := ca.Issue(t, "client", "anyone")
	c := e.dial(t, DialSecurity{CAFile: ca.CertFile, CertFile: ccert, KeyFile: ckey})
	wantCode(t, "mTLS Append", appendTo(c, context.Background(), "kafka.x"), codes.OK)
	nc := e.dial(t, DialSecurity{CAFile: ca.CertFile})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wantCode(t, "no client certificate", appendTo(nc, ctx, "kafka.x"), codes.Unavailable)
}

func TestLoadCredentialsErrors(t *testing.T) {
	for name, body := range map[string]string{
		"short token":  "token s p\n",
		"bad verb":     "token s p write:kafka.\n",
		"no prefix":    "token s p read\n",
		"unknown kind": "user s p read:*\n",
		"dup token":    "token s p read:*\ntoken s q read:*\n",
		"short cert":   "cert alice\n",
	} {
		if _, err := LoadCredentials(writeFile(t, "c", body)); !errors.Is(err, ErrAuthConfig) {
			t.Errorf("%s: %v, want ErrAuthConfig", name, err)
		}
	}
	if _, err := LoadCredentials("/nonexistent"); !errors.Is(err, ErrAuthConfig) {
		t.Errorf("missing file: %v", err)
	}
}
