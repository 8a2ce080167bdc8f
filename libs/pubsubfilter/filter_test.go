package pubsubfilter

import (
	"errors"
	"strings"
	"testing"
)

// msgs are the attribute sets the evaluation tables refer to by name.
var msgs = map[string]map[string]string{
	"none":   nil,
	"com":    {"domain": "com", "lang": "en"},
	"net":    {"domain": "net", "lang": "en"},
	"co":     {"domain": "co"},
	"empty":  {"domain": ""},
	"nolang": {"lang": "fr"},
	"odd":    {"iana.org/language_tag": "en-GB", "ce-type": "a.b", "2fa": "on", "みんな": "x", "q\"k": "v\n"},
}

func TestParseAndMatch(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string // names in msgs that match; the rest must not
	}{
		{``, []string{"none", "com", "net", "co", "empty", "nolang", "odd"}},
		{`attributes:domain`, []string{"com", "net", "co", "empty"}},
		{`NOT attributes:domain`, []string{"none", "nolang", "odd"}},
		{`-attributes:domain`, []string{"none", "nolang", "odd"}},
		{`attributes.domain = "com"`, []string{"com"}},
		{`attributes.domain="com"`, []string{"com"}},
		{`attributes.domain = ""`, []string{"empty"}},
		// != matches when the attribute is absent, too.
		{`attributes.domain != "com"`, []string{"none", "net", "co", "empty", "nolang", "odd"}},
		{`NOT attributes.domain = "com"`, []string{"none", "net", "co", "empty", "nolang", "odd"}},
		{`attributes:domain AND attributes.domain != "com"`, []string{"net", "co", "empty"}},
		{`hasPrefix(attributes.domain, "co")`, []string{"com", "co"}},
		{`hasPrefix( attributes.domain , "" )`, []string{"com", "net", "co", "empty"}},
		{`NOT hasPrefix(attributes.domain, "co")`, []string{"none", "net", "empty", "nolang", "odd"}},
		{`attributes.Domain = "com"`, nil},
		{`attributes.domain = "COM"`, nil},
		{`attributes:domain AND attributes:lang`, []string{"com", "net"}},
		{`attributes.domain = "com" OR attributes.domain = "net" OR attributes.lang = "fr"`, []string{"com", "net", "nolang"}},
		{`attributes:lang AND (attributes.domain = "net" OR attributes.domain = "co")`, []string{"net"}},
		{`(attributes:lang AND attributes.domain = "net") OR attributes.domain = "co"`, []string{"net", "co"}},
		// NOT binds tighter than AND and OR.
		{`NOT attributes:lang AND attributes:domain`, []string{"co", "empty"}},
		{`NOT attributes:lang OR attributes.domain = "com"`, []string{"none", "com", "co", "empty", "odd"}},
		{`NOT (attributes:lang OR attributes:domain)`, []string{"none", "odd"}},
		{`NOT (NOT attributes:domain)`, []string{"com", "net", "co", "empty"}},
		{`-(attributes:lang)`, []string{"none", "co", "empty", "odd"}},
		{`((((attributes:domain))))`, []string{"com", "net", "co", "empty"}},
		{" \t\nattributes:domain\r\n ", []string{"com", "net", "co", "empty"}},
		// Keys that need quoting, and keys that do not.
		{`attributes:"iana.org/language_tag"`, []string{"odd"}},
		{`attributes."iana.org/language_tag" = "en-GB"`, []string{"odd"}},
		{`hasPrefix(attributes."iana.org/language_tag", "en")`, []string{"odd"}},
		{`attributes.ce-type = "a.b"`, []string{"odd"}},
		{`attributes:"2fa"`, []string{"odd"}},
		{`attributes:"みんな"`, []string{"odd"}},
		{`attributes:"\u307F\u3093\u306A"`, []string{"odd"}},
		{`attributes:"q\"k" AND attributes."q\"k" = "v\n"`, []string{"odd"}},
		{`attributes:_x`, nil},
		{`attributes:AND`, nil},
		// Escapes.
		{`attributes.domain = "\x63om"`, []string{"com"}},
		{`attributes.domain = "\143om"`, []string{"com"}},
		{`attributes.domain = "\U00000063om"`, []string{"com"}},
		{`attributes."q\x22k" = "v\012"`, []string{"odd"}},
		{`attributes.domain = "\\\"\'\a\b\f\n\r\t\v"`, nil},
	} {
		f, err := Parse(tc.expr)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.expr, err)
			continue
		}
		if f.String() != tc.expr {
			t.Errorf("Parse(%q).String() = %q", tc.expr, f.String())
		}
		want := map[string]bool{}
		for _, name := range tc.want {
			want[name] = true
		}
		for name, attrs := range msgs {
			if got := f.Match(attrs); got != want[name] {
				t.Errorf("Parse(%q).Match(%s %v) = %v, want %v", tc.expr, name, attrs, got, want[name])
			}
			lookup := func(k string) (string, bool) { v, ok := attrs[k]; return v, ok }
			if got := f.MatchFunc(lookup); got != want[name] {
				t.Errorf("Parse(%q).MatchFunc(%s) = %v, want %v", tc.expr, name, got, want[name])
			}
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct {
		expr string
		at   int    // byte offset the error must name
		msg  string // substring the error must contain
	}{
		{" ", 0, "only whitespace"},
		{`attributes`, 10, "want : or ."},
		{`attributes domain`, 10, "want : or ."},
		{`attributes:`, 11, "want an attribute key"},
		{`attributes.domain`, 17, "want = or !="},
		{`attributes.domain "com"`, 18, "want = or !="},
		{`attributes.domain =`, 18, "must be a string literal"},
		{`attributes.domain = com`, 18, "must be a string literal"},
		{`attributes.domain == "com"`, 18, "not =="},
		{`attributes.domain < "com"`, 18, "want = or !="},
		{`attributes.domain = 'com'`, 20, "double quotes"},
		{`attributes:'domain'`, 11, "double quotes"},
		{`attributes:domain = "com"`, 18, "want AND, OR"},
		{`attributes : domain`, 10, "want : or ."},
		{`attributes. domain = "x"`, 11, "want an attribute key"},
		{`attributes.domain = "com`, 20, "unterminated string"},
		{`attributes:"domain`, 11, "unterminated string"},
		{`attributes.domain = "com\"`, 20, "unterminated string"},
		{`attributes.domain = "a\`, 22, "unterminated escape"},
		{`attributes.domain = "\q"`, 21, "unknown escape"},
		{`attributes.domain = "\x6"`, 21, "needs 2 digits"},
		{`attributes.domain = "\xe9"`, 21, `\x7f`},
		{`attributes.domain = "\351"`, 21, `\177`},
		{`attributes.domain = "\18"`, 21, "needs 3 digits"},
		{`attributes.domain = "\uD800"`, 21, "not a Unicode code point"},
		{`attributes.domain = "\U00110000"`, 21, "not a Unicode code point"},
		{`attributes.domain = "\u12"`, 21, "needs 4 digits"},
		{"attributes.domain = \"a\tb\"", 22, "raw control character"},
		{"attributes.domain = \"\xff\"", 21, "UTF-8"},
		{`attributes:""`, 11, "empty attribute key"},
		{`attributes:2fa`, 11, "starts with a letter"},
		{`attributes:-x`, 11, "starts with a letter"},
		{`attributes:みんな`, 11, "starts with a letter"},
		{`attributes:iana.org`, 15, "quote keys"},
		{`attributes:a/b`, 12, "quote keys"},
		{`attributes.a/b = "x"`, 12, "quote keys"},
		// Boolean operators.
		{`attributes:a AND attributes:b OR attributes:c`, 30, "cannot be mixed"},
		{`attributes:a OR attributes:b AND attributes:c`, 29, "cannot be mixed"},
		{`(attributes:a OR attributes:b AND attributes:c)`, 30, "cannot be mixed"},
		{`attributes:a and attributes:b`, 13, `"AND"`},
		{`attributes:a or attributes:b`, 13, `"OR"`},
		{`not attributes:a`, 0, `"NOT"`},
		{`attributes:a AND`, 13, "at the end"},
		{`attributes:a AND `, 13, "at the end"},
		{`AND attributes:a`, 0, "needs a condition before"},
		{`attributes:a AND OR attributes:b`, 17, "needs a condition before"},
		{`(attributes:a)AND(attributes:b)`, 14, "whitespace before AND"},
		{`attributes:a AND(attributes:b)`, 16, "whitespace after AND"},
		{`NOT(attributes:a)`, 3, "whitespace after NOT"},
		{`NOT`, 3, "unexpected end"},
		{`NOT NOT attributes:a`, 4, "one negation"},
		{`NOT -attributes:a`, 4, "one negation"},
		{`--attributes:a`, 1, "one negation"},
		{`-NOT attributes:a`, 1, "one negation"},
		{`- attributes:a`, 0, "must touch"},
		{`-`, 0, "must touch"},
		{`attributes:a attributes:b`, 13, "want AND, OR"},
		{`attributes:a ANDattributes:b`, 13, "want AND, OR"},
		// Parentheses.
		{`(attributes:a`, 0, "unclosed ("},
		{`(attributes:a attributes:b)`, 14, "want AND, OR or )"},
		{`attributes:a)`, 12, "unmatched )"},
		{`()`, 1, "want a condition"},
		{`(`, 1, "unexpected end"},
		// Functions and names.
		{`hasprefix(attributes.a, "x")`, 0, "unknown function"},
		{`hasSuffix(attributes.a, "x")`, 0, "unknown function"},
		{`hasPrefix (attributes.a, "x")`, 0, "unknown name"},
		{`hasPrefix`, 0, "unknown name"},
		{`hasPrefix(attributes:a, "x")`, 10, "attributes.KEY first"},
		{`hasPrefix("x", attributes.a)`, 10, "attributes.KEY first"},
		{`hasPrefix(attributes.a)`, 22, "want ,"},
		{`hasPrefix(attributes.a, x)`, 24, "string literal second"},
		{`hasPrefix(attributes.a, "x", "y")`, 27, "two arguments"},
		{`hasPrefix(attributes.a, "x"`, 9, "unclosed ("},
		{`attrs:a`, 0, "unknown name"},
		{`Attributes:a`, 0, "unknown name"},
		{`message.data = "x"`, 0, "unknown name"},
		{`"x"`, 0, "not a string literal"},
		{`true`, 0, "unknown name"},
		{`=`, 0, "want a condition"},
	} {
		f, err := Parse(tc.expr)
		if err == nil {
			t.Errorf("Parse(%q) = %v, want an error", tc.expr, f)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q): %v does not wrap ErrInvalid", tc.expr, err)
		}
		if f != nil {
			t.Errorf("Parse(%q) returned a Filter with its error", tc.expr)
		}
		want := "at byte " + itoa(tc.at) + ":"
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Parse(%q): %q, want %q and %q", tc.expr, err, want, tc.msg)
		}
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestMaxLen(t *testing.T) {
	// Exactly 256 bytes is accepted; 257 is not.
	base := `attributes.k = ""`
	fits := base[:len(base)-1] + strings.Repeat("v", MaxLen-len(base)) + `"`
	if len(fits) != MaxLen {
		t.Fatalf("test filter is %d bytes", len(fits))
	}
	if _, err := Parse(fits); err != nil {
		t.Fatalf("Parse(%d bytes): %v", len(fits), err)
	}
	over := fits[:len(fits)-1] + `v"`
	_, err := Parse(over)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "257 bytes") {
		t.Fatalf("Parse(%d bytes) = %v, want ErrInvalid naming the length", len(over), err)
	}
	// The limit counts bytes, not characters: 128 two-byte runes are 256 bytes.
	if _, err := Parse(`attributes.k = "` + strings.Repeat("é", 120) + `"`); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Parse(over 256 bytes of UTF-8) = %v, want ErrInvalid", err)
	}
}

func TestNestingDepth(t *testing.T) {
	nest := func(n int) string {
		return strings.Repeat("(", n) + "attributes:a" + strings.Repeat(")", n)
	}
	f, err := Parse(nest(maxDepth))
	if err != nil {
		t.Fatalf("Parse(depth %d): %v", maxDepth, err)
	}
	if !f.Match(map[string]string{"a": ""}) {
		t.Fatalf("depth %d filter does not match", maxDepth)
	}
	for _, expr := range []string{
		nest(maxDepth + 1),
		nest(120),                   // fits in 256 bytes
		strings.Repeat("(", MaxLen), // unclosed, and deep
		strings.Repeat("NOT (", 40) + "attributes:a" + strings.Repeat(")", 40),
	} {
		if _, err := Parse(expr); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%d bytes of nesting) = %v, want ErrInvalid", len(expr), err)
		}
	}
	if _, err := Parse(nest(maxDepth + 1)); !strings.Contains(err.Error(), "nested more than") {
		t.Errorf("Parse(depth %d): %v, want the nesting limit named", maxDepth+1, err)
	}
}

func TestNilAndEmpty(t *testing.T) {
	var f *Filter
	if !f.Match(map[string]string{"a": "b"}) || !f.MatchFunc(nil) || f.String() != "" {
		t.Fatal("nil *Filter must match everything and print as \"\"")
	}
	f, err := Parse("")
	if err != nil || f == nil || !f.Match(nil) || !f.MatchFunc(nil) {
		t.Fatalf("Parse(\"\") = %v, %v; want a Filter matching everything", f, err)
	}
	f, err = Parse(`attributes.a != "x"`)
	if err != nil {
		t.Fatal(err)
	}
	if !f.MatchFunc(nil) {
		t.Fatal("a nil lookup must mean no attributes")
	}
}

func TestMatchFuncShortCircuits(t *testing.T) {
	f, err := Parse(`attributes:a OR attributes:b OR attributes:c`)
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	f.MatchFunc(func(k string) (string, bool) {
		asked = append(asked, k)
		return "", k == "b"
	})
	if strings.Join(asked, ",") != "a,b" {
		t.Fatalf("lookups %v, want a,b", asked)
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	f, err := Parse(`attributes:lang AND (attributes.domain = "net" OR hasPrefix(attributes.domain, "co")) AND NOT attributes.x != "y"`)
	if err != nil {
		t.Fatal(err)
	}
	attrs := map[string]string{"lang": "en", "domain": "com", "x": "y"}
	lookup := func(k string) (string, bool) { v, ok := attrs[k]; return v, ok }
	if n := testing.AllocsPerRun(100, func() { f.Match(attrs) }); n != 0 {
		t.Errorf("Match allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { f.MatchFunc(lookup) }); n != 0 {
		t.Errorf("MatchFunc allocates %v times", n)
	}
}

func BenchmarkMatch(b *testing.B) {
	f, err := Parse(`attributes:lang AND (attributes.domain = "net" OR hasPrefix(attributes.domain, "co")) AND NOT attributes.x != "y"`)
	if err != nil {
		b.Fatal(err)
	}
	attrs := map[string]string{"lang": "en", "domain": "com", "x": "y", "a": "1", "b": "2"}
	b.ReportAllocs()
	for b.Loop() {
		if !f.Match(attrs) {
			b.Fatal("no match")
		}
	}
}

func BenchmarkParse(b *testing.B) {
	const expr = `attributes:lang AND (attributes.domain = "net" OR hasPrefix(attributes."iana.org/x", "co\n")) AND NOT attributes.x != "y"`
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(expr); err != nil {
			b.Fatal(err)
		}
	}
}
