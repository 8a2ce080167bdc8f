package grpcx

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
)

// Credentials is the table of static bearer tokens and of the rights of certificate
// principals, read from a file (see LoadCredentials).
type Credentials struct {
	tokens map[[sha256.Size]byte]Principal // by the token's SHA-256: lookups do not leak timing
	certs  map[string][]Right              // by certificate common name
}

// LoadCredentials reads a credentials file: one entry per line, fields separated by
// blanks, '#' starts a comment:
//
//	token SECRET PRINCIPAL RIGHT...   a bearer token ("authorization: Bearer SECRET")
//	cert  COMMON-NAME RIGHT...        rights of a client certificate with that CN
//
// RIGHT is VERB:PREFIX (ParseRight). Errors wrap ErrAuthConfig and name the line.
func LoadCredentials(file string) (*Credentials, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrAuthConfig, err)
	}
	defer f.Close()
	c := &Credentials{tokens: map[[sha256.Size]byte]Principal{}, certs: map[string][]Right{}}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%w: %s:%d: %s", ErrAuthConfig, file, n, fmt.Sprintf(format, a...))
		}
		switch fields[0] {
		case "token":
			if len(fields) < 4 {
				return nil, bad("want: token SECRET PRINCIPAL RIGHT...")
			}
			rights, err := ParseRights(fields[3:])
			if err != nil {
				return nil, bad("%v", err)
			}
			sum := sha256.Sum256([]byte(fields[1]))
			if _, dup := c.tokens[sum]; dup {
				return nil, bad("token listed twice")
			}
			c.tokens[sum] = Principal{Name: fields[2], Via: "token", Rights: rights}
		case "cert":
			if len(fields) < 3 {
				return nil, bad("want: cert COMMON-NAME RIGHT...")
			}
			rights, err := ParseRights(fields[2:])
			if err != nil {
				return nil, bad("%v", err)
			}
			c.certs[fields[1]] = append(c.certs[fields[1]], rights...)
		default:
			return nil, bad("%q is not token or cert", fields[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrAuthConfig, file, err)
	}
	return c, nil
}

// token returns the principal of a static token.
func (c *Credentials) token(secret string) (Principal, bool) {
	if c == nil {
		return Principal{}, false
	}
	p, ok := c.tokens[sha256.Sum256([]byte(secret))]
	return p, ok
}

// cert returns the rights listed for a certificate common name.
func (c *Credentials) cert(cn string) []Right {
	if c == nil {
		return nil
	}
	return c.certs[cn]
}
