// Package passhash makes and checks the password hashes of MQTT listener logins: bcrypt
// (`$2a$`, `$2b$`, `$2y$`, as htpasswd -B writes) and argon2id (RFC 9106) in the PHC
// string format `$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<hash>` (salt and
// hash in unpadded standard base64, as the argon2 reference CLI and libsodium write).
// The coordinator hashes passwords with it (never keeping one in plain text) and the
// mqtt-bridge checks them. Parse bounds the cost parameters, so that a hostile or
// mistaken hash cannot make one CONNECT burn seconds of CPU or gigabytes of memory.
package passhash

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
)

// Bounds of the cost parameters Parse accepts.
const (
	// MinBcryptCost and MaxBcryptCost bound a bcrypt hash's cost (log2 rounds):
	// cost 14 takes about a second of one core, each step doubles it.
	MinBcryptCost = bcrypt.MinCost
	MaxBcryptCost = 14
	// MaxArgon2Memory bounds m, in KiB (64 MiB, RFC 9106's second recommended
	// option); m is at least 8 KiB per lane (the algorithm's own minimum).
	MaxArgon2Memory = 64 << 10
	// MaxArgon2Time bounds t, the passes over the memory.
	MaxArgon2Time = 10
	// MaxArgon2Threads bounds p, the lanes.
	MaxArgon2Threads = 16
	// Argon2 salt and hash lengths, in bytes.
	MinArgon2Salt, MaxArgon2Salt = 8, 64
	MinArgon2Key, MaxArgon2Key   = 16, 64
)

// Argon2id parameters of the hashes Argon2id makes: RFC 9106's second recommended
// option with memory lowered to 19 MiB, t=2, as OWASP's password storage guidance
// gives for argon2id; 16-byte salt, 32-byte hash.
const (
	DefaultArgon2Memory  = 19 << 10
	DefaultArgon2Time    = 2
	DefaultArgon2Threads = 1
	defaultArgon2Salt    = 16
	defaultArgon2Key     = 32
)

// ErrFormat is a hash that is neither a bcrypt hash nor an argon2id PHC string, or is
// malformed.
var ErrFormat = errors.New("not a bcrypt or argon2id hash")

// ErrCost is a well-formed hash whose cost parameters are outside the bounds above.
var ErrCost = errors.New("hash cost parameters out of bounds")

// Scheme names a hash's algorithm.
type Scheme string

// Schemes.
const (
	Bcrypt   Scheme = "bcrypt"
	Argon2id Scheme = "argon2id"
)

// Hash is a parsed password hash, checked against the bounds.
type Hash struct {
	scheme  Scheme
	encoded []byte // bcrypt: the whole hash
	// argon2id
	memory  uint32
	time    uint32
	threads uint8
	salt    []byte
	key     []byte
}

// Scheme is the hash's algorithm.
func (h *Hash) Scheme() Scheme { return h.scheme }

// Parse checks s: a bcrypt hash of cost MinBcryptCost..MaxBcryptCost, or an argon2id
// PHC string (version 19) within the argon2 bounds. It returns ErrFormat or ErrCost
// (wrapped, with the reason) otherwise.
func Parse(s string) (*Hash, error) {
	switch {
	case strings.HasPrefix(s, "$2a$"), strings.HasPrefix(s, "$2b$"), strings.HasPrefix(s, "$2y$"):
		cost, err := bcrypt.Cost([]byte(s))
		if err != nil || len(s) != 60 {
			return nil, fmt.Errorf("%w: bcrypt: malformed", ErrFormat)
		}
		if cost < MinBcryptCost || cost > MaxBcryptCost {
			return nil, fmt.Errorf("%w: bcrypt cost %d, want %d..%d", ErrCost, cost, MinBcryptCost, MaxBcryptCost)
		}
		return &Hash{scheme: Bcrypt, encoded: []byte(s)}, nil
	case strings.HasPrefix(s, "$argon2id$"):
		return parseArgon2id(s)
	case strings.HasPrefix(s, "$argon2"):
		return nil, fmt.Errorf("%w: only argon2id is accepted, not argon2i or argon2d", ErrFormat)
	}
	return nil, ErrFormat
}

// parseArgon2id parses `$argon2id$v=19$m=M,t=T,p=P$salt$hash`.
func parseArgon2id(s string) (*Hash, error) {
	parts := strings.Split(s, "$")
	// "", "argon2id", "v=19", "m=..,t=..,p=..", salt, hash
	if len(parts) != 6 {
		return nil, fmt.Errorf("%w: argon2id: want $argon2id$v=19$m=M,t=T,p=P$salt$hash", ErrFormat)
	}
	if parts[2] != "v=19" {
		return nil, fmt.Errorf("%w: argon2id: version %q, want v=19", ErrFormat, parts[2])
	}
	params := strings.Split(parts[3], ",")
	if len(params) != 3 {
		return nil, fmt.Errorf("%w: argon2id: parameters %q, want m=M,t=T,p=P", ErrFormat, parts[3])
	}
	var vals [3]uint64
	for i, name := range []string{"m=", "t=", "p="} {
		v, ok := strings.CutPrefix(params[i], name)
		if !ok {
			return nil, fmt.Errorf("%w: argon2id: parameters %q, want m=M,t=T,p=P", ErrFormat, parts[3])
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || v != strconv.FormatUint(n, 10) {
			return nil, fmt.Errorf("%w: argon2id: parameter %q is not a decimal number", ErrFormat, params[i])
		}
		vals[i] = n
	}
	m, t, p := vals[0], vals[1], vals[2]
	if p < 1 || p > MaxArgon2Threads || t < 1 || t > MaxArgon2Time || m < 8*p || m > MaxArgon2Memory {
		return nil, fmt.Errorf("%w: argon2id m=%d,t=%d,p=%d, want p 1..%d, t 1..%d, m 8*p..%d KiB",
			ErrCost, m, t, p, MaxArgon2Threads, MaxArgon2Time, MaxArgon2Memory)
	}
	salt, err := base64.RawStdEncoding.Strict().DecodeString(parts[4])
	if err != nil || len(salt) < MinArgon2Salt || len(salt) > MaxArgon2Salt {
		return nil, fmt.Errorf("%w: argon2id: salt must be %d..%d bytes of unpadded base64", ErrFormat, MinArgon2Salt, MaxArgon2Salt)
	}
	key, err := base64.RawStdEncoding.Strict().DecodeString(parts[5])
	if err != nil || len(key) < MinArgon2Key || len(key) > MaxArgon2Key {
		return nil, fmt.Errorf("%w: argon2id: hash must be %d..%d bytes of unpadded base64", ErrFormat, MinArgon2Key, MaxArgon2Key)
	}
	return &Hash{scheme: Argon2id, memory: uint32(m), time: uint32(t), threads: uint8(p), salt: salt, key: key}, nil
}

// Verify reports whether password is the one hashed (in constant time for argon2id;
// bcrypt's own comparison for bcrypt).
func (h *Hash) Verify(password []byte) bool {
	switch h.scheme {
	case Bcrypt:
		return bcrypt.CompareHashAndPassword(h.encoded, password) == nil
	case Argon2id:
		k := argon2.IDKey(password, h.salt, h.time, h.memory, h.threads, uint32(len(h.key)))
		return subtle.ConstantTimeCompare(k, h.key) == 1
	}
	return false
}

// HashArgon2id hashes password with argon2id at the default parameters and a fresh
// random salt, in the PHC string format.
func HashArgon2id(password []byte) (string, error) {
	salt := make([]byte, defaultArgon2Salt)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	k := argon2.IDKey(password, salt, DefaultArgon2Time, DefaultArgon2Memory, DefaultArgon2Threads, defaultArgon2Key)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, DefaultArgon2Memory, DefaultArgon2Time, DefaultArgon2Threads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(k)), nil
}

// HashBcrypt hashes password with bcrypt at cost (bcrypt.DefaultCost, 10, when 0).
func HashBcrypt(password []byte, cost int) (string, error) {
	if cost == 0 {
		cost = bcrypt.DefaultCost
	}
	if cost < MinBcryptCost || cost > MaxBcryptCost {
		return "", fmt.Errorf("%w: bcrypt cost %d, want %d..%d", ErrCost, cost, MinBcryptCost, MaxBcryptCost)
	}
	b, err := bcrypt.GenerateFromPassword(password, cost)
	return string(b), err
}
