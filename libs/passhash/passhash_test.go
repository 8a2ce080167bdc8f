package passhash

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// refArgon2id was written by the argon2 reference CLI (Debian's argon2 package):
// echo -n hunter2 | argon2 somesalt1234 -id -t 2 -m 12 -p 2 -l 32 -e
const refArgon2id = "$argon2id$v=19$m=4096,t=2,p=2$c29tZXNhbHQxMjM0$ujbdBmxtd247nmKHnxZa7U0yXZsrwcNzt0rJgeiohY0"

// The reference implementation's hash verifies with its password only.
func TestArgon2idReference(t *testing.T) {
	h, err := Parse(refArgon2id)
	if err != nil {
		t.Fatal(err)
	}
	if h.Scheme() != Argon2id || !h.Verify([]byte("hunter2")) || h.Verify([]byte("hunter3")) || h.Verify(nil) {
		t.Fatalf("scheme %s: the reference hash does not verify as it should", h.Scheme())
	}
}

// What HashArgon2id and HashBcrypt make parses and verifies; two hashes of one
// password differ (fresh salts).
func TestHashAndVerify(t *testing.T) {
	a1, err := HashArgon2id([]byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := HashArgon2id([]byte("s3cret"))
	if a1 == a2 || !strings.HasPrefix(a1, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("argon2id hashes %q %q", a1, a2)
	}
	b, err := HashBcrypt([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{a1, b} {
		h, err := Parse(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if !h.Verify([]byte("s3cret")) || h.Verify([]byte("s3cret ")) {
			t.Fatalf("%s does not verify as it should", s)
		}
	}
	if _, err := HashBcrypt([]byte("x"), MaxBcryptCost+1); !errors.Is(err, ErrCost) {
		t.Fatalf("bcrypt cost %d: %v, want ErrCost", MaxBcryptCost+1, err)
	}
}

// Hashes outside the bounds are ErrCost before any hashing, malformed ones ErrFormat.
func TestParseBounds(t *testing.T) {
	const salt, key = "c29tZXNhbHQxMjM0", "ujbdBmxtd247nmKHnxZa7U0yXZsrwcNzt0rJgeiohY0"
	a := func(params string) string { return "$argon2id$v=19$" + params + "$" + salt + "$" + key }
	b15, err := bcrypt.GenerateFromPassword([]byte("x"), 4)
	if err != nil {
		t.Fatal(err)
	}
	// The same hash with its cost field rewritten: Parse reads the cost first.
	bcryptCost := func(c string) string { return string(b15[:4]) + c + string(b15[6:]) }
	for _, tc := range []struct {
		hash string
		want error
	}{
		{a("m=4096,t=2,p=2"), nil},
		{a("m=65536,t=10,p=16"), nil},
		{a("m=65537,t=2,p=1"), ErrCost},         // memory over 64 MiB
		{a("m=4194304,t=2,p=1"), ErrCost},       // 4 GiB
		{a("m=4096,t=11,p=1"), ErrCost},         // passes
		{a("m=4096,t=0,p=1"), ErrCost},          // no pass
		{a("m=4096,t=1,p=17"), ErrCost},         // lanes
		{a("m=4096,t=1,p=0"), ErrCost},          // no lane
		{a("m=15,t=1,p=2"), ErrCost},            // under 8 KiB per lane
		{a("m=99999999999,t=1,p=1"), ErrFormat}, // not a uint32
		{a("m=+4096,t=1,p=1"), ErrFormat},
		{a("m=04096,t=1,p=1"), ErrFormat},
		{a("t=2,m=4096,p=2"), ErrFormat}, // order
		{a("m=4096,t=2"), ErrFormat},
		{"$argon2id$v=16$m=4096,t=2,p=2$" + salt + "$" + key, ErrFormat},
		{"$argon2id$v=19$m=4096,t=2,p=2$" + salt + "=$" + key, ErrFormat}, // padded
		{"$argon2id$v=19$m=4096,t=2,p=2$c2FsdA$" + key, ErrFormat},        // 4-byte salt
		{"$argon2id$v=19$m=4096,t=2,p=2$" + salt + "$c2hvcnQ", ErrFormat}, // 5-byte hash
		{"$argon2id$v=19$m=4096,t=2,p=2$" + salt, ErrFormat},
		{"$argon2i$v=19$m=4096,t=2,p=2$" + salt + "$" + key, ErrFormat},
		{bcryptCost("04"), nil},
		{bcryptCost("14"), nil},
		{bcryptCost("15"), ErrCost},
		{bcryptCost("31"), ErrCost},
		{string(b15[:59]), ErrFormat},
		{"$1$abc$def", ErrFormat},
		{"hunter2", ErrFormat},
		{"", ErrFormat},
	} {
		_, err := Parse(tc.hash)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("Parse(%q) = %v, want %v", tc.hash, err, tc.want)
		}
	}
}
