// Package sasl holds the server side of the SASL mechanisms kafka-gateway serves on its
// SASL_PLAINTEXT and SASL_SSL listeners (KIP-43, KIP-152): PLAIN (RFC 4616),
// SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677; the primitives are
// github.com/xdg-go/scram's) and OAUTHBEARER (RFC 7628). An Authenticator knows the
// enabled mechanisms and where credentials come from; each authentication attempt is an
// Exchange driven by SaslAuthenticate requests (package handler).
//
// Credentials are never kept in plain text: SCRAM credentials are salted and iterated
// (StoredKey and ServerKey, RFC 5802 §3), and a PLAIN password is checked by deriving
// the SCRAM keys from it with the stored salt and iteration count.
package sasl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Mechanism names, as Kafka clients send them in SaslHandshake.
const (
	MechPlain       = "PLAIN"
	ScramSHA256     = "SCRAM-SHA-256"
	ScramSHA512     = "SCRAM-SHA-512"
	MechOAuthBearer = "OAUTHBEARER"
)

// Errors of the package.
var (
	// ErrAuthFailed is an authentication that did not succeed: bad credentials, an
	// unknown user, a malformed or out-of-order client message. The handler answers
	// SASL_AUTHENTICATION_FAILED and the connection is closed.
	ErrAuthFailed = errors.New("authentication failed")
	// ErrUnknownUser is returned by a credential source that has no such user.
	ErrUnknownUser = errors.New("unknown user")
	// ErrUnavailable is returned by a credential source that cannot answer now
	// (coordinator unreachable); the attempt fails and the client may retry.
	ErrUnavailable = errors.New("credential store unavailable")
	// ErrConfig reports an unusable SASL configuration.
	ErrConfig = errors.New("sasl config")
)

// Exchange is one authentication attempt with one mechanism.
type Exchange interface {
	// Step consumes the client's next message and returns the server's answer. done
	// reports that the client is authenticated (out is the last server message, maybe
	// empty). An error wrapping ErrAuthFailed ends the attempt; out may then hold a
	// mechanism-level error message the client expects before the failure (OAUTHBEARER).
	Step(ctx context.Context, in []byte) (out []byte, done bool, err error)
	// Principal is the authenticated Kafka principal ("User:<name>") once done.
	Principal() string
	// Expiry is when the credential presented expires (an OAUTHBEARER token's exp);
	// zero when it does not. KIP-368 bounds the session by it.
	Expiry() time.Time
}

// Mechanism starts exchanges of one SASL mechanism.
type Mechanism interface {
	Name() string
	Start() Exchange
}

// Authenticator is the set of enabled mechanisms. It is safe for concurrent use.
type Authenticator struct {
	mechs map[string]Mechanism
	names []string
}

// New returns an Authenticator serving mechs, listed in SaslHandshake in that order.
func New(mechs ...Mechanism) *Authenticator {
	a := &Authenticator{mechs: map[string]Mechanism{}}
	for _, m := range mechs {
		if _, dup := a.mechs[m.Name()]; dup {
			continue
		}
		a.mechs[m.Name()] = m
		a.names = append(a.names, m.Name())
	}
	return a
}

// Mechanisms lists the enabled mechanism names.
func (a *Authenticator) Mechanisms() []string {
	if a == nil {
		return nil
	}
	return slices.Clone(a.names)
}

// Start begins an exchange with the named mechanism; ok is false when it is not enabled.
func (a *Authenticator) Start(name string) (ex Exchange, ok bool) {
	if a == nil {
		return nil, false
	}
	m, ok := a.mechs[name]
	if !ok {
		return nil, false
	}
	return m.Start(), true
}

// Principal is the Kafka principal of a SASL user name (KIP-11's KafkaPrincipal "User" type).
func Principal(user string) string { return "User:" + user }

func failed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrAuthFailed, fmt.Sprintf(format, args...))
}
