package pubsubfilter

import (
	"errors"
	"testing"
)

// FuzzParse checks that Parse never panics, fails only with ErrInvalid, keeps the
// expression as given, and that a parsed filter's Match never panics and agrees with
// MatchFunc.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		``,
		`attributes:domain`,
		`NOT attributes:"iana.org/language_tag" AND attributes.domain != "com"`,
		`-attributes:a OR (attributes.b = "\u00e9\x41\101" OR hasPrefix(attributes.c, ""))`,
		`((((attributes:a))))`,
		`attributes:a AND attributes:b OR attributes:c`,
		`hasPrefix(attributes.a, "x`,
		"attributes.a = \"\xff\"",
	} {
		f.Add(seed, "domain", "com")
	}
	f.Fuzz(func(t *testing.T, expr, key, val string) {
		flt, err := Parse(expr)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || flt != nil {
				t.Fatalf("Parse(%q) = %v, %v", expr, flt, err)
			}
			return
		}
		if flt.String() != expr {
			t.Fatalf("String() = %q, want %q", flt.String(), expr)
		}
		for _, attrs := range []map[string]string{nil, {key: val}, {key: "", val: key}} {
			m := flt.Match(attrs)
			mf := flt.MatchFunc(func(k string) (string, bool) { v, ok := attrs[k]; return v, ok })
			if m != mf {
				t.Fatalf("Parse(%q): Match %v, MatchFunc %v for %v", expr, m, mf, attrs)
			}
		}
	})
}
