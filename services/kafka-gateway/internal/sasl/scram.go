package sasl

// SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka serves them (KIP-84):
// the client-first message (gs2 header "n,," or "n,a=<user>,", no channel binding),
// the server-first message with the stored salt and iteration count and a nonce that
// extends the client's, the client-final message whose nonce must be exactly that
// combined nonce and whose proof must match the StoredKey, and the server-final
// verifier. github.com/xdg-go/scram does the message parsing, nonce check and proof
// arithmetic.

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"hash"
	"strings"
	"time"

	"github.com/xdg-go/scram"
)

// Bounds of SCRAM iteration counts, as Kafka's ScramMechanism sets them.
const (
	MinIterations = 4096
	MaxIterations = 16384
)

// Credential is a stored SCRAM credential (RFC 5802 §3): never the password, only the
// salt, iteration count and the two keys derived from the salted password.
type Credential struct {
	Salt       []byte
	Iterations int
	StoredKey  []byte
	ServerKey  []byte
}

// Credentials is a source of SCRAM credentials. Credential returns ErrUnknownUser for
// a user without a credential of that mechanism and ErrUnavailable when it cannot
// answer now.
type Credentials interface {
	Credential(ctx context.Context, mechanism, user string) (Credential, error)
}

// HashOf is the hash function of a SCRAM mechanism (nil for another name).
func HashOf(mechanism string) func() hash.Hash {
	switch mechanism {
	case ScramSHA256:
		return sha256.New
	case ScramSHA512:
		return sha512.New
	}
	return nil
}

// KeysFromSalted derives StoredKey and ServerKey from a salted password (RFC 5802 §3:
// ClientKey = HMAC(SaltedPassword, "Client Key"), StoredKey = H(ClientKey), ServerKey
// = HMAC(SaltedPassword, "Server Key")). KIP-554's AlterUserScramCredentials sends the
// salted password; only these keys are stored.
func KeysFromSalted(mechanism string, salted []byte) (storedKey, serverKey []byte) {
	h := HashOf(mechanism)
	mac := hmac.New(h, salted)
	mac.Write([]byte("Client Key"))
	clientKey := mac.Sum(nil)
	sum := h()
	sum.Write(clientKey)
	storedKey = sum.Sum(nil)
	mac = hmac.New(h, salted)
	mac.Write([]byte("Server Key"))
	return storedKey, mac.Sum(nil)
}

// SaltPassword is Hi(password, salt, iterations) (RFC 5802 §2.2, PBKDF2 with HMAC),
// applied to the password's bytes as Kafka's ScramFormatter does.
func SaltPassword(mechanism, password string, salt []byte, iterations int) ([]byte, error) {
	h := HashOf(mechanism)
	if h == nil {
		return nil, errors.New("not a SCRAM mechanism: " + mechanism)
	}
	return pbkdf2.Key(h, password, salt, iterations, h().Size())
}

// NewCredential salts password with a fresh random salt (the salt length is the hash
// size) and derives its keys.
func NewCredential(mechanism, password string, iterations int) (Credential, error) {
	h := HashOf(mechanism)
	if h == nil {
		return Credential{}, errors.New("not a SCRAM mechanism: " + mechanism)
	}
	salt := make([]byte, h().Size())
	_, _ = rand.Read(salt)
	salted, err := SaltPassword(mechanism, password, salt, iterations)
	if err != nil {
		return Credential{}, err
	}
	st, sv := KeysFromSalted(mechanism, salted)
	return Credential{Salt: salt, Iterations: iterations, StoredKey: st, ServerKey: sv}, nil
}

// usable reports whether c may be used at all: a salt and an iteration count within
// MinIterations..MaxIterations. Kafka's ScramSaslServer refuses a stored credential
// below the minimum; above the maximum a single PLAIN attempt would cost the gateway
// an unbounded PBKDF2 (a credential written to the coordinator past KIP-554's checks).
func (c Credential) usable() bool {
	return len(c.Salt) > 0 && c.Iterations >= MinIterations && c.Iterations <= MaxIterations
}

// Verify reports whether password matches the credential (for PLAIN over SCRAM
// credentials); never for a credential outside the iteration bounds.
func (c Credential) Verify(mechanism, password string) bool {
	if !c.usable() {
		return false
	}
	salted, err := SaltPassword(mechanism, password, c.Salt, c.Iterations)
	if err != nil {
		return false
	}
	st, _ := KeysFromSalted(mechanism, salted)
	return hmac.Equal(st, c.StoredKey)
}

// Scram is the SCRAM-SHA-256 or SCRAM-SHA-512 mechanism over a credential source.
type Scram struct {
	name  string
	creds Credentials
}

// NewScram returns mechanism name (ScramSHA256 or ScramSHA512) over creds.
func NewScram(name string, creds Credentials) *Scram { return &Scram{name: name, creds: creds} }

// Name implements Mechanism.
func (s *Scram) Name() string { return s.name }

// Start implements Mechanism.
func (s *Scram) Start() Exchange { return &scramExchange{m: s} }

type scramExchange struct {
	m      *Scram
	conv   *scram.ServerConversation
	user   string
	lookup error
	done   bool

	// What the librdkafka nonce quirk needs (see finalQuirk).
	cred        Credential
	clientFirst string // client-first-message-bare
	serverFirst string
	cnonce      string // the client's nonce
	nonce       string // the combined nonce sent in server-first
}

func (e *scramExchange) Step(ctx context.Context, in []byte) ([]byte, bool, error) {
	if e.done {
		return nil, false, failed("%s exchange already complete", e.m.name)
	}
	if e.conv == nil {
		hg := scram.SHA256
		if e.m.name == ScramSHA512 {
			hg = scram.SHA512
		}
		srv, err := hg.NewServer(func(user string) (scram.StoredCredentials, error) {
			c, err := e.m.creds.Credential(ctx, e.m.name, user)
			if err == nil && !c.usable() {
				err = ErrUnknownUser
			}
			if err != nil {
				e.lookup = err
				return scram.StoredCredentials{}, err
			}
			e.cred = c
			return scram.StoredCredentials{
				KeyFactors: scram.KeyFactors{Salt: string(c.Salt), Iters: c.Iterations},
				StoredKey:  c.StoredKey, ServerKey: c.ServerKey,
			}, nil
		})
		if err != nil {
			return nil, false, err
		}
		e.conv = srv.NewConversation()
		out, err := e.conv.Step(string(in))
		if err != nil {
			e.done = true
			if errors.Is(e.lookup, ErrUnavailable) {
				return nil, false, failed("%s: %v", e.m.name, e.lookup)
			}
			// Kafka gives one message for an unknown user and a bad proof alike.
			return nil, false, failed("invalid credentials with SASL mechanism %s", e.m.name)
		}
		if a := e.conv.AuthzID(); a != "" && a != e.conv.Username() {
			e.done = true
			return nil, false, failed("authorization id %q differs from the user name", a)
		}
		e.user = e.conv.Username()
		e.serverFirst = out
		e.nonce = attr(out, 'r')
		if _, bare, ok := strings.Cut(string(in), ",n="); ok {
			e.clientFirst = "n=" + bare
			e.cnonce = attr(e.clientFirst, 'r')
		}
		return []byte(out), false, nil
	}
	e.done = true
	if n := attr(string(in), 'r'); n != e.nonce && e.cnonce != "" && n == e.cnonce+e.nonce {
		return e.finalQuirk(string(in))
	}
	out, err := e.conv.Step(string(in))
	if err != nil || !e.conv.Valid() {
		return nil, false, failed("invalid credentials with SASL mechanism %s", e.m.name)
	}
	return []byte(out), true, nil
}

// finalQuirk verifies a client-final-message whose nonce is the client's nonce
// followed by the whole server nonce (which already starts with the client's):
// librdkafka 2.0-2.3 builds it so, and Kafka accepts it because its ScramSaslServer
// only checks that the final nonce ends with the server nonce. The server's part of
// the nonce is still required in full, so a replay of another exchange fails as it
// does on the strict path; the proof is checked over the message as sent (RFC 5802 §3).
func (e *scramExchange) finalQuirk(msg string) ([]byte, bool, error) {
	bad := failed("invalid credentials with SASL mechanism %s", e.m.name)
	i := strings.LastIndex(msg, ",p=")
	if i < 0 || attr(msg, 'c') != "biws" {
		return nil, false, bad
	}
	withoutProof, proofB64 := msg[:i], msg[i+3:]
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	h := HashOf(e.m.name)
	if err != nil || len(proof) != h().Size() {
		return nil, false, bad
	}
	authMsg := []byte(e.clientFirst + "," + e.serverFirst + "," + withoutProof)
	mac := hmac.New(h, e.cred.StoredKey)
	mac.Write(authMsg)
	clientKey := mac.Sum(nil)
	for j := range clientKey {
		clientKey[j] ^= proof[j]
	}
	sum := h()
	sum.Write(clientKey)
	if !hmac.Equal(sum.Sum(nil), e.cred.StoredKey) {
		return nil, false, bad
	}
	mac = hmac.New(h, e.cred.ServerKey)
	mac.Write(authMsg)
	return []byte("v=" + base64.StdEncoding.EncodeToString(mac.Sum(nil))), true, nil
}

// attr returns the value of SCRAM attribute name in a comma-separated message ("").
func attr(msg string, name byte) string {
	for _, f := range strings.Split(msg, ",") {
		if len(f) >= 2 && f[0] == name && f[1] == '=' {
			return f[2:]
		}
	}
	return ""
}

func (e *scramExchange) Principal() string { return Principal(e.user) }
func (e *scramExchange) Expiry() time.Time { return time.Time{} }
