package sasl

import (
	"context"
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/xdg-go/scram"
)

func users(t *testing.T) *Users {
	t.Helper()
	u := NewUsers()
	if err := u.Add("alice", "pw"); err != nil {
		t.Fatal(err)
	}
	return u
}

// run drives an exchange with an xdg-go/scram client.
func run(t *testing.T, mech, user, pass string) error {
	t.Helper()
	hg := scram.SHA256
	if mech == ScramSHA512 {
		hg = scram.SHA512
	}
	cl, err := hg.NewClient(user, pass, "")
	if err != nil {
		t.Fatal(err)
	}
	conv := cl.NewConversation()
	ex := NewScram(mech, users(t)).Start()
	msg, err := conv.Step("")
	if err != nil {
		t.Fatal(err)
	}
	for {
		out, done, err := ex.Step(context.Background(), []byte(msg))
		if err != nil {
			return err
		}
		if msg, err = conv.Step(string(out)); err != nil {
			t.Fatalf("client rejects the server: %v", err)
		}
		if done {
			if ex.Principal() != "User:"+user {
				t.Fatalf("principal %q", ex.Principal())
			}
			return nil
		}
	}
}

func TestScramStrict(t *testing.T) {
	for _, m := range []string{ScramSHA256, ScramSHA512} {
		if err := run(t, m, "alice", "pw"); err != nil {
			t.Errorf("%s alice: %v", m, err)
		}
		if err := run(t, m, "alice", "wrong"); !errors.Is(err, ErrAuthFailed) {
			t.Errorf("%s wrong password: %v", m, err)
		}
		if err := run(t, m, "nobody", "pw"); !errors.Is(err, ErrAuthFailed) {
			t.Errorf("%s unknown user: %v", m, err)
		}
	}
}

// TestScramLibrdkafkaNonce: a client-final whose nonce is the client nonce followed by
// the whole server nonce (librdkafka 2.0-2.3) is accepted with a right proof and
// refused with a wrong one; a final without the server's part is refused.
func TestScramLibrdkafkaNonce(t *testing.T) {
	u := users(t)
	for _, tc := range []struct {
		name   string
		pass   string
		nonce  func(cnonce, snonce string) string
		wantOK bool
	}{
		{"librdkafka", "pw", func(c, s string) string { return c + s }, true},
		{"librdkafka wrong password", "wrong", func(c, s string) string { return c + s }, false},
		{"client nonce only", "pw", func(c, s string) string { return c }, false},
		{"other server nonce", "pw", func(c, s string) string { return c + c + "AAAA" }, false},
	} {
		ex := NewScram(ScramSHA512, u).Start()
		cnonce := "rdkafka-like=nonce~0123456789abcd"
		first := "n,,n=alice,r=" + cnonce
		sf, _, err := ex.Step(context.Background(), []byte(first))
		if err != nil {
			t.Fatal(err)
		}
		snonce := attr(string(sf), 'r')
		salt, _ := base64.StdEncoding.DecodeString(attr(string(sf), 's'))
		salted, _ := SaltPassword(ScramSHA512, tc.pass, salt, MinIterations)
		h := HashOf(ScramSHA512)
		mac := hmac.New(h, salted)
		mac.Write([]byte("Client Key"))
		clientKey := mac.Sum(nil)
		sum := h()
		sum.Write(clientKey)
		stored := sum.Sum(nil)
		wop := "c=biws,r=" + tc.nonce(cnonce, snonce)
		mac = hmac.New(h, stored)
		mac.Write([]byte(strings.TrimPrefix(first, "n,,") + "," + string(sf) + "," + wop))
		sig := mac.Sum(nil)
		for i := range sig {
			sig[i] ^= clientKey[i]
		}
		out, done, err := ex.Step(context.Background(), []byte(wop+",p="+base64.StdEncoding.EncodeToString(sig)))
		if ok := err == nil && done && strings.HasPrefix(string(out), "v="); ok != tc.wantOK {
			t.Errorf("%s: done %v err %v, want ok %v", tc.name, done, err, tc.wantOK)
		}
	}
}

func TestPlain(t *testing.T) {
	p := NewPlain(users(t))
	for msg, ok := range map[string]bool{
		"\x00alice\x00pw":      true,
		"alice\x00alice\x00pw": true,
		"bob\x00alice\x00pw":   false,
		"\x00alice\x00wrong":   false,
		"\x00nobody\x00pw":     false,
		"alice":                false,
		"\x00\x00":             false,
	} {
		ex := p.Start()
		_, done, err := ex.Step(context.Background(), []byte(msg))
		if (err == nil && done) != ok {
			t.Errorf("PLAIN %q: done %v err %v, want ok %v", msg, done, err, ok)
		}
	}
}
