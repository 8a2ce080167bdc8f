package server

// Kafka's ssl.principal.mapping.rules (KIP-371): the rules that turn a TLS client
// certificate's subject DN (RFC 2253, as Go's pkix.Name.String and Java's
// X500Principal.getName write it) into the principal's name. Rules are tried in
// order; "RULE:<regex>/<replacement>/[L|U]" applies when the regex matches the whole
// DN and gives the replacement ($1... for groups), lower- or upper-cased with L or U;
// "DEFAULT" gives the DN unchanged. A DN no rule matches is refused (the connection is
// closed), as Kafka refuses it.

import (
	"fmt"
	"regexp"
	"strings"
)

type principalRule struct {
	dflt bool
	re   *regexp.Regexp
	repl string
	kase byte // 0, 'L' or 'U'
}

// principalRules is a parsed ssl.principal.mapping.rules.
type principalRules []principalRule

// parsePrincipalRules parses s ("" = DEFAULT).
func parsePrincipalRules(s string) (principalRules, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return principalRules{{dflt: true}}, nil
	}
	var out principalRules
	for s != "" {
		switch {
		case strings.HasPrefix(s, "DEFAULT"):
			out = append(out, principalRule{dflt: true})
			s = s[len("DEFAULT"):]
		case strings.HasPrefix(s, "RULE:"):
			s = s[len("RULE:"):]
			pat, rest, ok := cutUnescaped(s)
			if !ok {
				return nil, fmt.Errorf("%w: ssl principal mapping rule %q: want RULE:pattern/replacement/[LU]", ErrConfig, s)
			}
			repl, rest, ok := cutUnescaped(rest)
			if !ok {
				return nil, fmt.Errorf("%w: ssl principal mapping rule %q: want RULE:pattern/replacement/[LU]", ErrConfig, s)
			}
			r := principalRule{repl: strings.ReplaceAll(repl, `\/`, "/")}
			if rest != "" && (rest[0] == 'L' || rest[0] == 'U') {
				r.kase, rest = rest[0], rest[1:]
			}
			re, err := regexp.Compile("^(?:" + strings.ReplaceAll(pat, `\/`, "/") + ")$")
			if err != nil {
				return nil, fmt.Errorf("%w: ssl principal mapping pattern %q: %v", ErrConfig, pat, err)
			}
			r.re = re
			out = append(out, r)
			s = rest
		default:
			return nil, fmt.Errorf("%w: ssl principal mapping rules: unexpected %q (want RULE:... or DEFAULT)", ErrConfig, s)
		}
		s = strings.TrimSpace(s)
		if s != "" {
			if s[0] != ',' {
				return nil, fmt.Errorf("%w: ssl principal mapping rules: want ',' before %q", ErrConfig, s)
			}
			s = strings.TrimSpace(s[1:])
		}
	}
	return out, nil
}

// cutUnescaped splits s at its first '/' not preceded by a backslash.
func cutUnescaped(s string) (before, after string, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			continue
		}
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

// apply maps a DN to a principal name; ok is false when no rule matches.
func (rs principalRules) apply(dn string) (string, bool) {
	for _, r := range rs {
		if r.dflt {
			return dn, true
		}
		if !r.re.MatchString(dn) {
			continue
		}
		name := r.re.ReplaceAllString(dn, r.repl)
		switch r.kase {
		case 'L':
			name = strings.ToLower(name)
		case 'U':
			name = strings.ToUpper(name)
		}
		return name, true
	}
	return "", false
}
