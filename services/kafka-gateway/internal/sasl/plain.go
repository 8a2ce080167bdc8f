package sasl

// PLAIN (RFC 4616): one client message "[authzid] NUL authcid NUL passwd"; Kafka allows
// an authzid only when it equals the user name. The password is checked against the
// SCRAM credentials of the user (SCRAM-SHA-512, then SCRAM-SHA-256), so no password is
// kept: PLAIN is for clients without SCRAM, over TLS.
//
// Checking a password is a PBKDF2 run of the credential's iterations (4 ms at 4096,
// 17 ms at 16384 with SHA-512 on one core), paid for every attempt, a wrong password
// included, by a client that has not authenticated. At most half the CPUs
// (PlainVerifySlots) check passwords at once, so a flood of PLAIN attempts for a known
// user name slows PLAIN logins but leaves the rest of the gateway its CPUs.

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"time"
)

// Plain is the PLAIN mechanism over a SCRAM credential source.
type Plain struct {
	creds  Credentials
	slots  chan struct{}                                  // password checks running
	verify func(c Credential, mech, password string) bool // Credential.Verify
}

// PlainVerifySlots is how many PLAIN password checks run at once: half of GOMAXPROCS
// (at least one).
func PlainVerifySlots() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// NewPlain returns PLAIN checking passwords against creds.
func NewPlain(creds Credentials) *Plain {
	return &Plain{creds: creds, slots: make(chan struct{}, PlainVerifySlots()), verify: Credential.Verify}
}

// Name implements Mechanism.
func (p *Plain) Name() string { return MechPlain }

// Start implements Mechanism.
func (p *Plain) Start() Exchange { return &plainExchange{p: p} }

type plainExchange struct {
	p    *Plain
	user string
	done bool
}

func (e *plainExchange) Step(ctx context.Context, in []byte) ([]byte, bool, error) {
	if e.done {
		return nil, false, failed("PLAIN exchange already complete")
	}
	e.done = true
	parts := bytes.Split(in, []byte{0})
	if len(parts) != 3 {
		return nil, false, failed("invalid SASL/PLAIN message: expected 3 NUL-separated fields")
	}
	authz, user, pass := string(parts[0]), string(parts[1]), string(parts[2])
	if user == "" || pass == "" {
		return nil, false, failed("invalid SASL/PLAIN message: empty user name or password")
	}
	if authz != "" && authz != user {
		return nil, false, failed("authorization id %q differs from the user name", authz)
	}
	for _, mech := range []string{ScramSHA512, ScramSHA256} {
		c, err := e.p.creds.Credential(ctx, mech, user)
		if errors.Is(err, ErrUnknownUser) {
			continue
		}
		if err != nil {
			return nil, false, failed("PLAIN: %v", err)
		}
		ok, err := e.p.check(ctx, c, mech, pass)
		if err != nil {
			return nil, false, failed("PLAIN: %v", err)
		}
		if ok {
			e.user = user
			return nil, true, nil
		}
		break
	}
	return nil, false, failed("invalid credentials with SASL mechanism PLAIN")
}

func (e *plainExchange) Principal() string { return Principal(e.user) }
func (e *plainExchange) Expiry() time.Time { return time.Time{} }

// check verifies password against c in one of the slots, waiting for one until ctx ends.
func (p *Plain) check(ctx context.Context, c Credential, mech, password string) (bool, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-p.slots }()
	return p.verify(c, mech, password), nil
}
