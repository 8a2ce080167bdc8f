package grpcx

import (
	"context"
	"flag"
	"fmt"
	"net"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/tlsx"
)

// Authentication modes of a server (ServerSecurity.Auth).
const (
	// AuthNone serves every caller (the default).
	AuthNone = "none"
	// AuthRequired serves only callers that present a verified client certificate or a
	// valid bearer token over TLS, and only the calls their rights cover.
	AuthRequired = "required"
)

// DefaultServiceNames are the certificate common names of Tributary's own services,
// which hold every right (AllRights).
var DefaultServiceNames = []string{"coordinator", "kafka-gateway", "pubsub-gateway", "mqtt-bridge"}

// ServerSecurity is a gRPC server's TLS and caller authentication. The zero value is
// plaintext without authentication: ServerOptions then adds nothing to the server.
type ServerSecurity struct {
	// TLS is the server certificate and client-certificate policy (mTLS).
	TLS tlsx.Server
	// Auth is AuthNone ("" too) or AuthRequired.
	Auth string
	// CredentialsFile lists static bearer tokens and certificate rights (LoadCredentials).
	CredentialsFile string
	// JWT, when enabled, accepts signed JWTs as bearer tokens.
	JWT JWTConfig
	// ServiceNames are the client-certificate common names that hold every right.
	ServiceNames []string
}

// RegisterServerFlags registers a server's security flags on fs: --tls-cert, --tls-key,
// --tls-client-ca, --tls-client-auth, --auth, --auth-credentials-file,
// --auth-service-names and the --auth-jwt-* flags.
func RegisterServerFlags(fs *flag.FlagSet, s *ServerSecurity) {
	RegisterTLSServerFlags(fs, &s.TLS)
	fs.StringVar(&s.Auth, "auth", AuthNone, "caller authentication: none, or required (a client certificate or a bearer token over TLS, authorized per channel prefix and verb)")
	fs.StringVar(&s.CredentialsFile, "auth-credentials-file", "", "file of static bearer tokens and certificate rights: lines 'token SECRET PRINCIPAL RIGHT...' and 'cert CN RIGHT...', RIGHT = read|append|admin|*:PREFIX|*")
	s.ServiceNames = DefaultServiceNames
	fs.Func("auth-service-names", "comma-separated client-certificate common names holding every right (default "+strings.Join(DefaultServiceNames, ",")+")", func(v string) error {
		s.ServiceNames = nil
		for n := range strings.SplitSeq(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				s.ServiceNames = append(s.ServiceNames, n)
			}
		}
		return nil
	})
	fs.StringVar(&s.JWT.HS256SecretFile, "auth-jwt-hs256-secret-file", "", "file holding the HS256 secret bearer JWTs are signed with (32 bytes or more)")
	fs.StringVar(&s.JWT.PublicKeyFile, "auth-jwt-public-key-file", "", "PEM public key (RSA or EC P-256) bearer JWTs are signed with (RS256, ES256)")
	fs.StringVar(&s.JWT.JWKSURL, "auth-jwt-jwks-url", "", "URL of the JWKS whose keys (by kid) sign bearer JWTs (RS256, ES256)")
	fs.StringVar(&s.JWT.Issuer, "auth-jwt-issuer", "", "required iss of bearer JWTs")
	fs.StringVar(&s.JWT.Audience, "auth-jwt-audience", "", "audience bearer JWTs must name in aud")
	fs.StringVar(&s.JWT.RightsClaim, "auth-jwt-rights-claim", "scope", "JWT claim holding the rights (space-separated string or array of VERB:PREFIX)")
}

// RegisterTLSServerFlags registers --tls-cert, --tls-key, --tls-client-ca and
// --tls-client-auth on fs: a gRPC server's TLS without caller authentication.
func RegisterTLSServerFlags(fs *flag.FlagSet, t *tlsx.Server) {
	fs.StringVar(&t.CertFile, "tls-cert", "", "PEM certificate chain of the gRPC server; with --tls-key turns TLS on")
	fs.StringVar(&t.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&t.ClientCAFile, "tls-client-ca", "", "PEM CA bundle client certificates are verified against (mTLS)")
	fs.Func("tls-client-auth", "client certificates: none, requested (verified when sent) or required (default none; requested with --auth=required and --tls-client-ca)", func(v string) error {
		t.ClientAuth = tlsx.ClientAuth(v)
		return nil
	})
}

// Validate checks the settings without loading files.
func (s ServerSecurity) Validate() error {
	switch s.Auth {
	case "", AuthNone:
		return nil
	case AuthRequired:
	default:
		return fmt.Errorf("%w: --auth=%q: want none or required", ErrAuthConfig, s.Auth)
	}
	if !s.TLS.Enabled() {
		return fmt.Errorf("%w: --auth=required needs TLS (--tls-cert, --tls-key): tokens and certificates are never accepted in clear", ErrAuthConfig)
	}
	if s.CredentialsFile == "" && !s.JWT.Enabled() && s.TLS.ClientCAFile == "" {
		return fmt.Errorf("%w: --auth=required accepts nobody: give --tls-client-ca, --auth-credentials-file or an --auth-jwt-* key", ErrAuthConfig)
	}
	return nil
}

// authOn reports whether callers are authenticated.
func (s ServerSecurity) authOn() bool { return s.Auth == AuthRequired }

// Rule is what one RPC needs: Verb on each resource Resources names in a request
// message (each message of a stream), plus whatever Needs adds (a queue's binding
// sources to read, its dead-letter log to append to). Resources nil means
// ClusterResource.
type Rule struct {
	Verb      Verb
	Resources func(req any) []string
	Needs     func(req any) []Need
}

// Need is one verb on one resource.
type Need struct {
	Verb     Verb
	Resource string
}

// Rules maps full method names ("/pkg.Service/Method") to rules. The standard health
// and reflection services are open to every authenticated caller; a method not listed
// needs admin on the cluster.
type Rules map[string]Rule

// open reports whether method is served to any authenticated caller.
func open(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.Health/") || strings.HasPrefix(method, "/grpc.reflection.")
}

// ServerOptions returns the server options that put s on a server, with rules for
// authorization: nothing when TLS and auth are off (no interceptor at all), the TLS
// credentials when only TLS is on, and with AuthRequired also the interceptors that
// answer UNAUTHENTICATED to a caller without credentials (a plaintext connection
// included: the port accepts both so it can say so) and PERMISSION_DENIED to one
// without the right. Errors wrap ErrAuthConfig or tlsx.ErrConfig.
func (s ServerSecurity) ServerOptions(rules Rules, log *zap.Logger) ([]grpc.ServerOption, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if !s.TLS.Enabled() {
		return nil, nil
	}
	if s.authOn() && s.TLS.ClientCAFile != "" && (s.TLS.ClientAuth == "" || s.TLS.ClientAuth == tlsx.ClientAuthNone) {
		s.TLS.ClientAuth = tlsx.ClientAuthRequested // token callers need no certificate
	}
	cfg, err := s.TLS.Config()
	if err != nil {
		return nil, err
	}
	if !s.authOn() {
		return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}, nil
	}
	a := &authenticator{rules: rules, log: log, services: map[string]bool{}}
	for _, n := range s.ServiceNames {
		a.services[n] = true
	}
	if s.CredentialsFile != "" {
		if a.creds, err = LoadCredentials(s.CredentialsFile); err != nil {
			return nil, err
		}
	}
	if s.JWT.Enabled() {
		if a.jwt, err = newJWTVerifier(s.JWT); err != nil {
			return nil, err
		}
	}
	return []grpc.ServerOption{
		grpc.Creds(&sniffCreds{TransportCredentials: credentials.NewTLS(cfg)}),
		grpc.ChainUnaryInterceptor(a.unary),
		grpc.ChainStreamInterceptor(a.stream),
	}, nil
}

// authenticator runs authentication and authorization for every call.
type authenticator struct {
	rules    Rules
	log      *zap.Logger
	services map[string]bool
	creds    *Credentials
	jwt      *jwtVerifier
}

type principalKey struct{}

// PrincipalFrom returns the authenticated caller of a call's context, nil when the
// server does not authenticate.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// authenticate finds the caller: a bearer token when the call carries one, else the
// verified client certificate. Errors are UNAUTHENTICATED statuses.
func (a *authenticator) authenticate(ctx context.Context) (*Principal, error) {
	pr, _ := peer.FromContext(ctx)
	var info credentials.TLSInfo
	if pr != nil {
		info, _ = pr.AuthInfo.(credentials.TLSInfo)
	}
	if info.State.Version == 0 {
		return nil, status.Error(codes.Unauthenticated, "TLS required: this server authenticates callers (client certificate or bearer token)")
	}
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("authorization")) > 0 {
		return a.bearer(ctx, md.Get("authorization")[0])
	}
	if chains := info.State.VerifiedChains; len(chains) > 0 && len(chains[0]) > 0 {
		cn := chains[0][0].Subject.CommonName
		if a.services[cn] {
			return &Principal{Name: cn, Via: "cert", Rights: AllRights}, nil
		}
		return &Principal{Name: cn, Via: "cert", Rights: a.creds.cert(cn)}, nil
	}
	return nil, status.Error(codes.Unauthenticated, "no credentials: present a client certificate or an authorization: Bearer token")
}

func (a *authenticator) bearer(ctx context.Context, h string) (*Principal, error) {
	scheme, tok, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "bearer") || tok == "" {
		return nil, status.Error(codes.Unauthenticated, "authorization metadata is not 'Bearer TOKEN'")
	}
	if p, ok := a.creds.token(tok); ok {
		return &p, nil
	}
	if a.jwt != nil && strings.Count(tok, ".") == 2 {
		p, err := a.jwt.verify(ctx, tok)
		if err != nil {
			return nil, status.Errorf(codes.Unauthenticated, "bearer token refused: %v", err)
		}
		return &p, nil
	}
	return nil, status.Error(codes.Unauthenticated, "bearer token refused: unknown token")
}

// authorize checks p's rights for one message of method. Errors are PERMISSION_DENIED.
func (a *authenticator) authorize(p *Principal, method string, msg any) error {
	if open(method) {
		return nil
	}
	r, ok := a.rules[method]
	if !ok {
		r = Rule{Verb: VerbAdmin}
	}
	var resources []string
	if r.Resources != nil {
		resources = r.Resources(msg)
	} else {
		resources = []string{ClusterResource}
	}
	for _, res := range resources {
		if err := a.check(p, method, r.Verb, res); err != nil {
			return err
		}
	}
	if r.Needs != nil {
		for _, n := range r.Needs(msg) {
			if err := a.check(p, method, n.Verb, n.Resource); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *authenticator) check(p *Principal, method string, v Verb, res string) error {
	if p.Allows(v, res) {
		return nil
	}
	what := res
	if what == ClusterResource {
		what = "the cluster (a right on *)"
	}
	a.log.Debug("call denied", zap.String("principal", p.Name), zap.String("method", method), zap.String("resource", res))
	return status.Errorf(codes.PermissionDenied, "%s %q may not %s %s", p.Via, p.Name, v, what)
}

func (a *authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p, err := a.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if err := a.authorize(p, info.FullMethod, req); err != nil {
		return nil, err
	}
	return handler(context.WithValue(ctx, principalKey{}, p), req)
}

func (a *authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	p, err := a.authenticate(ss.Context())
	if err != nil {
		return err
	}
	if r, ok := a.rules[info.FullMethod]; !open(info.FullMethod) && (!ok || r.Resources == nil && r.Needs == nil) {
		// Nothing to read from the messages: check once, now.
		if err := a.authorize(p, info.FullMethod, nil); err != nil {
			return err
		}
	}
	return handler(srv, &authStream{ServerStream: ss, a: a, p: p, method: info.FullMethod,
		ctx: context.WithValue(ss.Context(), principalKey{}, p)})
}

// authStream authorizes every message received on a stream.
type authStream struct {
	grpc.ServerStream
	a      *authenticator
	p      *Principal
	method string
	ctx    context.Context
}

func (s *authStream) Context() context.Context { return s.ctx }

func (s *authStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.a.authorize(s.p, s.method, m)
}

// sniffCreds is TLS that also lets a plaintext HTTP/2 connection through (its first
// byte is not a TLS handshake record), unauthenticated, so that its calls can be
// answered UNAUTHENTICATED instead of a broken connection.
type sniffCreds struct {
	credentials.TransportCredentials
}

// recordTypeHandshake is the first byte of a TLS ClientHello record.
const recordTypeHandshake = 0x16

func (c *sniffCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		return nil, nil, err
	}
	pc := &prefixConn{Conn: conn, first: b[0], pending: true}
	if b[0] == recordTypeHandshake {
		return c.TransportCredentials.ServerHandshake(pc)
	}
	return pc, plaintextInfo{}, nil
}

func (c *sniffCreds) Clone() credentials.TransportCredentials {
	return &sniffCreds{TransportCredentials: c.TransportCredentials.Clone()}
}

// plaintextInfo marks a connection that did not speak TLS.
type plaintextInfo struct{ credentials.CommonAuthInfo }

func (plaintextInfo) AuthType() string { return "insecure" }

// prefixConn gives back the byte read to sniff the protocol before the rest.
type prefixConn struct {
	net.Conn
	first   byte
	pending bool
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if c.pending && len(p) > 0 {
		c.pending = false
		p[0] = c.first
		if len(p) == 1 {
			return 1, nil
		}
		n, err := c.Conn.Read(p[1:])
		return n + 1, err
	}
	return c.Conn.Read(p)
}
