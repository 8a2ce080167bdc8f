package sasl

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdg-go/scram"
)

// TestScramHostileClients: every malformed, replayed or forged SCRAM message ends the
// exchange with ErrAuthFailed, and an ended exchange accepts nothing more.
func TestScramHostileClients(t *testing.T) {
	u := users(t)
	ctx := context.Background()
	for _, mech := range []string{ScramSHA256, ScramSHA512} {
		hg := scram.SHA256
		if mech == ScramSHA512 {
			hg = scram.SHA512
		}
		// A good conversation, recorded.
		cl, err := hg.NewClient("alice", "pw", "")
		if err != nil {
			t.Fatal(err)
		}
		conv := cl.NewConversation()
		first, _ := conv.Step("")
		ex := NewScram(mech, u).Start()
		serverFirst, _, err := ex.Step(ctx, []byte(first))
		if err != nil {
			t.Fatal(err)
		}
		final, err := conv.Step(string(serverFirst))
		if err != nil {
			t.Fatal(err)
		}
		if _, done, err := ex.Step(ctx, []byte(final)); err != nil || !done {
			t.Fatalf("%s good conversation: %v", mech, err)
		}
		if _, _, err := ex.Step(ctx, []byte(final)); !errors.Is(err, ErrAuthFailed) {
			t.Errorf("%s: a step after completion: %v", mech, err)
		}

		fail := func(name string, msgs ...string) {
			t.Helper()
			ex := NewScram(mech, u).Start()
			var err error
			for i, m := range msgs {
				if _, _, err = ex.Step(ctx, []byte(m)); err != nil {
					if i != len(msgs)-1 {
						t.Errorf("%s %s: message %d refused early: %v", mech, name, i, err)
					}
					break
				}
			}
			if !errors.Is(err, ErrAuthFailed) {
				t.Errorf("%s %s: %v, want ErrAuthFailed", mech, name, err)
			}
			if _, _, err := ex.Step(ctx, []byte(final)); !errors.Is(err, ErrAuthFailed) {
				t.Errorf("%s %s: a step after the failure: %v", mech, name, err)
			}
		}
		bare := strings.TrimPrefix(first, "n,,")
		withProof := func(final, proof string) string { return final[:strings.LastIndex(final, ",p=")] + ",p=" + proof }
		// The recorded client-final against a fresh exchange (new server nonce).
		fail("replayed client-final", first, final)
		fail("wrong proof", first, withProof(final, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="))
		fail("proof not base64", first, withProof(final, "!!!not base64!!!"))
		fail("empty proof", first, withProof(final, ""))
		fail("channel binding claimed in final only", first, strings.Replace(final, "c=biws", "c=eSws", 1))
		fail("channel binding asked", "p=tls-unique,,"+bare)
		fail("authzid of another user", "n,a=bob,"+bare)
		fail("no nonce", "n,,n=alice")
		fail("empty user", "n,,n=,r=abc")
		fail("unknown user", "n,,n=nobody,r=abc")
		fail("no gs2 header", bare)
		fail("garbage", "\x00\xff\x01")
		fail("empty", "")
		fail("final without proof", first, final[:strings.LastIndex(final, ",p=")])
	}
}

// TestPlainHostileClients: PLAIN refuses every message that is not exactly
// "[authzid] NUL authcid NUL passwd" with a non-empty user and password, and an
// authzid other than the user, as Kafka's PlainSaslServer does.
func TestPlainHostileClients(t *testing.T) {
	p := NewPlain(users(t))
	for _, msg := range []string{
		"\x00alice\x00pw\x00",         // a fourth field
		"\x00alice\x00p\x00w",         // NUL inside the password
		"\x00al\x00ice\x00pw",         // NUL inside the user
		"\x00\x00pw",                  // empty user
		"\x00alice\x00",               // empty password
		"alice\x00\x00pw",             // authzid without a user
		"ALICE\x00alice\x00pw",        // authzid differs in case only
		"alice \x00alice\x00pw",       // authzid differs by a blank
		"\x00alice \x00pw",            // user with a trailing blank
		"\x00alice\x00pw\x00\x00\x00", // trailing NULs
		"",
	} {
		ex := p.Start()
		if _, done, err := ex.Step(context.Background(), []byte(msg)); done || !errors.Is(err, ErrAuthFailed) {
			t.Errorf("PLAIN %q: done %v err %v, want ErrAuthFailed", msg, done, err)
		}
		if _, _, err := ex.Step(context.Background(), []byte("\x00alice\x00pw")); !errors.Is(err, ErrAuthFailed) {
			t.Errorf("PLAIN %q: a second message after the failure: %v", msg, err)
		}
	}
}

// stored is a credential source holding one credential for every user.
type stored Credential

func (s stored) Credential(context.Context, string, string) (Credential, error) {
	return Credential(s), nil
}

// TestCredentialsOutsideIterationBoundsRefused: a stored credential with fewer than
// 4096 or more than 16384 iterations (or no salt) authenticates nobody, with PLAIN or
// SCRAM, and costs no PBKDF2 run: one with 2^30 iterations is refused at once.
func TestCredentialsOutsideIterationBoundsRefused(t *testing.T) {
	for _, it := range []int{1, MinIterations - 1, MaxIterations + 1, 1 << 30} {
		c, err := NewCredential(ScramSHA512, "pw", min(it, MaxIterations+1))
		if err != nil {
			t.Fatal(err)
		}
		c.Iterations = it
		if it < MinIterations {
			// A real credential of that count: the password would verify.
			if c, err = NewCredential(ScramSHA512, "pw", it); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		if _, done, err := NewPlain(stored(c)).Start().Step(context.Background(), []byte("\x00alice\x00pw")); done || !errors.Is(err, ErrAuthFailed) {
			t.Errorf("PLAIN over a credential of %d iterations: done %v err %v", it, done, err)
		}
		if _, _, err := NewScram(ScramSHA512, stored(c)).Start().Step(context.Background(), []byte("n,,n=alice,r=abc")); !errors.Is(err, ErrAuthFailed) {
			t.Errorf("SCRAM over a credential of %d iterations: %v", it, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("refusing a credential of %d iterations took %v", it, d)
		}
	}
	noSalt, _ := NewCredential(ScramSHA512, "pw", MinIterations)
	noSalt.Salt = nil
	if _, done, _ := NewPlain(stored(noSalt)).Start().Step(context.Background(), []byte("\x00alice\x00pw")); done {
		t.Error("PLAIN over a credential without a salt authenticated")
	}
}

// TestLoadUsersRefusesWhatItCannotRead: a users file line too long to read is an error,
// not the silent end of the file (the users after it missing).
func TestLoadUsersRefusesWhatItCannotRead(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users")
	body := "alice:pw\nbob:" + strings.Repeat("x", 70<<10) + "\ncarol:pw\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadUsers(file); !errors.Is(err, ErrConfig) {
		t.Fatalf("users file with a 70 KiB line: %v, want ErrConfig", err)
	}
}

// TestPlainChecksArePaced: concurrent PLAIN attempts check passwords at most
// PlainVerifySlots at a time (each check is a PBKDF2 run an unauthenticated client can
// trigger at will), and one whose connection ends while it waits gives up.
func TestPlainChecksArePaced(t *testing.T) {
	p := NewPlain(users(t))
	var running, peak atomic.Int32
	p.verify = func(Credential, string, string) bool {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			if m := peak.Load(); n <= m || peak.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond) // a password check's cost
		return false
	}
	var wg sync.WaitGroup
	for range 8 * PlainVerifySlots() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _ = p.Start().Step(context.Background(), []byte("\x00alice\x00wrong"))
		}()
	}
	wg.Wait()
	if n := int(peak.Load()); n < 1 || n > PlainVerifySlots() {
		t.Fatalf("%d password checks ran at once, want 1..%d", n, PlainVerifySlots())
	}
	// Every slot taken: an attempt whose context ends waits no longer.
	for range PlainVerifySlots() {
		p.slots <- struct{}{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := p.Start().Step(ctx, []byte("\x00alice\x00pw")); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("attempt with every slot taken and its context over: %v", err)
	}
}
