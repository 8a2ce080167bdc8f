package server

// Connection security: the TLS handshake of SSL and SASL_SSL listeners, the principal
// of a TLS client certificate, and the SASL mechanisms of SASL listeners.

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/tributary/tributary/services/kafka-gateway/internal/handler"
	"github.com/tributary/tributary/services/kafka-gateway/internal/sasl"
)

// errNoPrincipalRule refuses a client certificate no principal mapping rule matches.
var errNoPrincipalRule = errors.New("no principal mapping rule matches the client certificate")

// TLSHandshakeTimeout bounds a client's TLS handshake; one that takes longer is closed.
const TLSHandshakeTimeout = 10 * time.Second

// kafkaListener is one bound Kafka listener.
type kafkaListener struct {
	spec listenerSpec
	ln   net.Listener
	tls  *tls.Config // SSL and SASL_SSL
}

// secure runs the TLS handshake of a TLS listener and returns the connection to serve
// with its authentication state: on SSL the principal of the client certificate (when
// one was verified), mapped by ssl.principal.mapping.rules, User:ANONYMOUS otherwise; on SASL listeners authentication comes
// next, through SaslHandshake and SaslAuthenticate.
func (s *Server) secure(c net.Conn, l *kafkaListener, log *zap.Logger) (net.Conn, *handler.Session, error) {
	principal := handler.AnonymousPrincipal
	if l.tls != nil {
		tc := tls.Server(&coalescingConn{Conn: c}, l.tls)
		ctx, cancel := context.WithTimeout(context.Background(), TLSHandshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			log.Debug("kafka TLS handshake failed", zap.Error(err))
			return c, nil, err
		}
		if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 && !l.spec.protocol.SASL() {
			dn := certs[0].Subject.String()
			name, ok := s.cfg.principalRules.apply(dn)
			if !ok {
				log.Info("closing kafka connection: no ssl.principal.mapping.rules rule matches the client certificate", zap.String("dn", dn))
				return c, nil, errNoPrincipalRule
			}
			principal = "User:" + name
		}
		c = tc
	}
	return c, handler.NewSession(l.spec.protocol.SASL(), principal), nil
}

// authenticator builds the SASL mechanisms from the config: the enabled mechanisms
// over the users file, Config.Credentials and the coordinator's credentials.
func (s *Server) authenticator() (*sasl.Authenticator, error) {
	names, err := s.cfg.mechanisms()
	if err != nil {
		return nil, err
	}
	var chain sasl.Chain
	if s.cfg.SASLUsersFile != "" {
		users, err := sasl.LoadUsers(s.cfg.SASLUsersFile)
		if err != nil {
			return nil, err
		}
		chain = append(chain, users)
	}
	if s.cfg.Credentials != nil {
		chain = append(chain, s.cfg.Credentials)
	}
	if s.remote != nil {
		chain = append(chain, s.remote)
	}
	var mechs []sasl.Mechanism
	for _, n := range names {
		switch n {
		case sasl.MechPlain:
			mechs = append(mechs, sasl.NewPlain(chain))
		case sasl.ScramSHA256, sasl.ScramSHA512:
			mechs = append(mechs, sasl.NewScram(n, chain))
		case sasl.MechOAuthBearer:
			mechs = append(mechs, sasl.NewOAuthBearer(s.tokenValidator()))
		}
	}
	return sasl.New(mechs...), nil
}

// tokenValidator is the configured OAUTHBEARER validator.
func (s *Server) tokenValidator() sasl.TokenValidator {
	if s.cfg.OAuthBearerUnsecured {
		s.log.Warn("OAUTHBEARER accepts unsecured (unsigned) tokens: for tests only")
		return sasl.Unsecured{SubClaim: s.cfg.OAuthBearerSubClaim}
	}
	var aud []string
	for _, a := range strings.Split(s.cfg.OAuthBearerAudience, ",") {
		if a = strings.TrimSpace(a); a != "" {
			aud = append(aud, a)
		}
	}
	return &sasl.JWKS{URL: s.cfg.OAuthBearerJWKSURL, Issuer: s.cfg.OAuthBearerIssuer, Audiences: aud,
		SubClaim: s.cfg.OAuthBearerSubClaim, RefreshInterval: s.cfg.OAuthBearerJWKSRefresh}
}
