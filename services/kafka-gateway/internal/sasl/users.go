package sasl

// Static users from a file, for simple setups (what Kafka keeps in its JAAS file for
// PLAIN): one "name:password" a line, '#' starts a comment line, blank lines are
// skipped. At load each password is salted and iterated into SCRAM-SHA-256 and
// SCRAM-SHA-512 credentials (fresh random salts, MinIterations) and then forgotten, so
// the users serve PLAIN and both SCRAM mechanisms.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Users is a fixed set of credentials. It implements Credentials.
type Users struct {
	creds map[string]map[string]Credential // mechanism -> user -> credential
}

// LoadUsers reads a static users file.
func LoadUsers(file string) (*Users, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: users file: %v", ErrConfig, err)
	}
	u := &Users{creds: map[string]map[string]Credential{ScramSHA256: {}, ScramSHA512: {}}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, pass, ok := strings.Cut(line, ":")
		if !ok || name == "" || pass == "" {
			return nil, fmt.Errorf("%w: users file %s line %d: want name:password", ErrConfig, file, n)
		}
		if err := u.Add(name, pass); err != nil {
			return nil, fmt.Errorf("%w: users file %s line %d: %v", ErrConfig, file, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		// A line past the scanner's 64 KiB would otherwise drop every user after it.
		return nil, fmt.Errorf("%w: users file %s: %v", ErrConfig, file, err)
	}
	return u, nil
}

// NewUsers returns an empty set (tests add users with Add).
func NewUsers() *Users {
	return &Users{creds: map[string]map[string]Credential{ScramSHA256: {}, ScramSHA512: {}}}
}

// Add derives the SCRAM credentials of name from password. Not safe to call
// concurrently with Credential.
func (u *Users) Add(name, password string) error {
	for mech, m := range u.creds {
		c, err := NewCredential(mech, password, MinIterations)
		if err != nil {
			return err
		}
		m[name] = c
	}
	return nil
}

// Credential implements Credentials.
func (u *Users) Credential(_ context.Context, mechanism, user string) (Credential, error) {
	c, ok := u.creds[mechanism][user]
	if !ok {
		return Credential{}, ErrUnknownUser
	}
	return c, nil
}

// Chain asks each source in turn; the first that knows the user answers.
type Chain []Credentials

// Credential implements Credentials.
func (ch Chain) Credential(ctx context.Context, mechanism, user string) (Credential, error) {
	var unavailable error
	for _, c := range ch {
		cr, err := c.Credential(ctx, mechanism, user)
		switch {
		case err == nil:
			return cr, nil
		case errors.Is(err, ErrUnknownUser):
			continue
		default:
			unavailable = err
		}
	}
	if unavailable != nil {
		return Credential{}, unavailable
	}
	return Credential{}, ErrUnknownUser
}
