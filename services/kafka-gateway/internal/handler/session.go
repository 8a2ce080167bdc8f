package handler

// The authentication state of one connection (KIP-43 SASL, KIP-152 SaslAuthenticate,
// KIP-368 re-authentication), read and changed by SaslHandshake and SaslAuthenticate
// and consulted by the server before it serves any other request.

import (
	"context"
	"sync"
	"time"

	"github.com/tributary/tributary/services/kafka-gateway/internal/sasl"
)

type saslState int

const (
	saslOff            saslState = iota // not a SASL listener
	saslStart                           // waiting for SaslHandshake
	saslHandshaken                      // mechanism chosen, waiting for its first message
	saslAuthenticating                  // exchange in progress
	saslDone                            // authenticated
)

// Session is one connection's authentication state. It is safe for concurrent use.
type Session struct {
	mu        sync.Mutex
	state     saslState
	principal string
	mech      string
	ex        sasl.Exchange
	raw       bool // SaslHandshake v0: the exchange's tokens come without Kafka headers
	reauth    bool // a KIP-368 re-authentication is in progress
	expires   time.Time
	closing   bool
	// share holds the connection's KIP-932 share sessions (share.go).
	share shareSessions
}

// NewSession returns the state of a new connection. On a SASL listener (saslListener)
// nothing but ApiVersions, SaslHandshake and SaslAuthenticate may be served until
// Authenticated; elsewhere the connection is authenticated as principal from the start
// (User:ANONYMOUS, or a TLS client certificate's mapped name).
func NewSession(saslListener bool, principal string) *Session {
	s := &Session{principal: principal}
	if saslListener {
		s.state = saslStart
		s.principal = AnonymousPrincipal
	}
	return s
}

// Principal is the connection's Kafka principal ("User:<name>").
func (s *Session) Principal() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.principal
}

// Authenticated reports whether requests other than ApiVersions, SaslHandshake and
// SaslAuthenticate may be served: always off a SASL listener, after a successful
// SaslAuthenticate on one. Not while a re-authentication (KIP-368) is in progress:
// Kafka's SaslServerAuthenticator then reads nothing but the exchange, so a request in
// between closes the connection, and beginning a re-authentication cannot stretch an
// expired session.
func (s *Session) Authenticated() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == saslOff || (s.state == saslDone && !s.reauth)
}

// VersionsAllowed reports whether an ApiVersions request may be served before the
// connection is authenticated: only before SaslHandshake. Once a mechanism is chosen
// (and throughout a KIP-368 re-authentication) Kafka's SaslServerAuthenticator reads
// nothing but the exchange's SaslAuthenticate, and any other request ends the
// connection ("Unexpected Kafka request ... during SASL authentication").
func (s *Session) VersionsAllowed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state != saslHandshaken && s.state != saslAuthenticating && !s.reauth
}

// RawTokens reports whether the next frame is a bare SASL token (after SaslHandshake
// v0, KIP-43) rather than a Kafka request.
func (s *Session) RawTokens() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw
}

// Expired reports whether the session lifetime (KIP-368) is over at now: the server
// then closes the connection at its next request unless that starts a re-authentication.
func (s *Session) Expired(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.expires.IsZero() && now.After(s.expires) && !s.reauth
}

// Closing reports whether the connection must be closed once the answer just produced
// is written (a failed or illegal authentication step).
func (s *Session) Closing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// handshake chooses the mechanism (SaslHandshake). It returns the Kafka error code.
func (s *Session) handshake(auth *sasl.Authenticator, mech string, version int16) (code int16, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case saslOff:
		return errIllegalSaslState, "SASL is not enabled on this listener"
	case saslStart:
	case saslDone:
		if version < 1 || s.reauth {
			s.closing = true
			return errIllegalSaslState, "unexpected SaslHandshake on an authenticated connection"
		}
		if mech != s.mech {
			s.closing = true
			return errIllegalSaslState, "re-authentication must use the mechanism of the original authentication, " + s.mech
		}
		s.reauth = true
	default:
		s.closing = true
		return errIllegalSaslState, "unexpected SaslHandshake: an authentication is in progress"
	}
	ex, ok := auth.Start(mech)
	if !ok {
		s.closing = true
		return errUnsupportedSaslMechanism, "unsupported SASL mechanism " + mech
	}
	s.mech, s.ex, s.raw = mech, ex, version == 0
	s.state = saslHandshaken
	if s.reauth {
		// The connection stays authenticated while it re-authenticates.
		s.state = saslDone
	}
	return 0, ""
}

// step feeds one client message to the exchange (SaslAuthenticate, or a raw token
// after SaslHandshake v0). On success it returns the server message and, when the
// exchange completed, the session lifetime granted (0 = unbounded).
func (s *Session) step(ctx context.Context, in []byte, maxReauth time.Duration, raw bool) (out []byte, lifetime time.Duration, code int16, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == saslOff {
		return nil, 0, errIllegalSaslState, "SASL is not enabled on this listener"
	}
	if s.ex == nil || s.raw != raw {
		s.closing = true
		return nil, 0, errIllegalSaslState, "unexpected SaslAuthenticate: send SaslHandshake (v1) first"
	}
	out, done, err := s.ex.Step(ctx, in)
	if err != nil {
		s.closing, s.ex = true, nil
		return out, 0, errSaslAuthenticationFailed, err.Error()
	}
	if !done {
		if !s.reauth {
			s.state = saslAuthenticating
		}
		return out, 0, 0, ""
	}
	p := s.ex.Principal()
	if s.reauth && p != s.principal {
		s.closing, s.ex = true, nil
		return nil, 0, errSaslAuthenticationFailed, "cannot change principals during re-authentication from " + s.principal + " to " + p
	}
	now := time.Now()
	exp := s.ex.Expiry()
	if !exp.IsZero() && !exp.After(now) {
		s.closing, s.ex = true, nil
		return nil, 0, errSaslAuthenticationFailed, "credential expired"
	}
	// The session ends at the credential's expiry even when connections.max.reauth.ms
	// is off, as Kafka's SaslServerAuthenticator computes it.
	switch {
	case maxReauth > 0 && (exp.IsZero() || exp.Sub(now) > maxReauth):
		lifetime = maxReauth
	case !exp.IsZero():
		lifetime = exp.Sub(now)
	}
	s.expires = time.Time{}
	if lifetime > 0 {
		s.expires = now.Add(lifetime)
	}
	s.principal, s.state, s.ex, s.raw, s.reauth = p, saslDone, nil, false, false
	return out, lifetime, 0, ""
}

// RawAuthenticate feeds a bare SASL token (after SaslHandshake v0) to the exchange and
// returns the bare token to send back; an error means the connection must be closed
// without an answer, as Kafka does.
func (h *Handler) RawAuthenticate(ctx context.Context, s *Session, token []byte) ([]byte, error) {
	out, _, code, msg := s.step(ctx, token, h.cfg.ConnectionsMaxReauth, true)
	if code != 0 {
		return nil, &authError{code: code, msg: msg}
	}
	if out == nil {
		out = []byte{}
	}
	return out, nil
}

type authError struct {
	code int16
	msg  string
}

func (e *authError) Error() string { return e.msg }

// Kafka error codes of the SASL APIs.
const (
	errUnsupportedSaslMechanism = 33
	errIllegalSaslState         = 34
	errSaslAuthenticationFailed = 58
)
