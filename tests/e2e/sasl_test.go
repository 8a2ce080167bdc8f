package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tributary/tributary/libs/tlsx"
	"github.com/tributary/tributary/libs/tlsx/tlsxtest"
	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// saslStack is a two-gateway stack serving SASL_SSL (and SASL_PLAINTEXT) beside
// PLAINTEXT, with one static user, admin, from a users file.
type saslStack struct {
	*stack.Stack
	ca  *tlsxtest.CA
	tls *tls.Config
}

const adminPass = "admin-secret"

// startSASLStack starts a stack for one test and closes it when the test ends.
func startSASLStack(t *testing.T) *saslStack {
	t.Helper()
	testenv.Require(t)
	ca := tlsxtest.NewCA(t)
	dir := t.TempDir()
	cert, key := ca.Issue(t, "gateway", "kafka-gateway")
	users := filepath.Join(dir, "users")
	if err := os.WriteFile(users, []byte("admin:"+adminPass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := stack.Start(context.Background(), stack.Options{
		Gateways:     2,
		Listeners:    []string{"SASL_SSL", "SASL_PLAINTEXT"},
		GatewayFlags: []string{"--tls-cert", cert, "--tls-key", key, "--sasl-users-file", users},
	})
	if err != nil {
		t.Fatalf("start secure stack: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stack logs:\n%s", s.LogTails(60))
		}
		_ = s.Close()
	})
	tc, err := tlsx.Client{CAFile: ca.CertFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	return &saslStack{Stack: s, ca: ca, tls: tc}
}

// client is a kgo client on gateway i's SASL_SSL listener.
func (s *saslStack) client(t *testing.T, i int, m sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.ListenerAddrs["SASL_SSL"][i]), kgo.DialTLSConfig(s.tls), kgo.SASL(m)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (s *saslStack) admin(t *testing.T, i int) *kadm.Client {
	return kadm.NewClient(s.client(t, i, scram.Auth{User: "admin", Pass: adminPass}.AsSha512Mechanism()))
}

// metadataErr is the error of one Metadata request through a fresh client.
func (s *saslStack) metadataErr(t *testing.T, i int, m sasl.Mechanism) error {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.ListenerAddrs["SASL_SSL"][i]), kgo.DialTLSConfig(s.tls), kgo.SASL(m), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	return err
}

// TestSASLSSLEndToEnd: SCRAM users created with kadm through one gateway authenticate
// on the other at once (a failed attempt there had cached their absence: the NATS
// notice drops it); kgo and kcat (librdkafka) produce and consume over SASL_SSL with
// SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN; the advertised brokers are the SASL_SSL
// endpoints of both gateways; a wrong password is SASL_AUTHENTICATION_FAILED; describe
// and delete work through kadm, and a deleted user no longer authenticates anywhere.
func TestSASLSSLEndToEnd(t *testing.T) {
	s := startSASLStack(t)
	ctx := ctxT(t, 3*time.Minute)
	alice512 := scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha512Mechanism()

	// Gateway 1 learns that alice does not exist (and caches it).
	if err := s.metadataErr(t, 1, alice512); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("alice before she exists: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	adm := s.admin(t, 0)
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: "alice-pw"},
		{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "alice-pw"},
	})
	if err != nil {
		t.Fatalf("alter scram: %v", err)
	}
	if r := res["alice"]; r.Err != nil {
		t.Fatalf("alice: %v", r.Err)
	}
	// kadm refuses too few iterations itself: send that one by hand.
	bad := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
	up.Name, up.Mechanism, up.Iterations, up.Salt, up.SaltedPassword = "bob", 1, 1000, []byte("salt"), []byte("salted")
	bad.Upsertions = append(bad.Upsertions, up)
	badResp, err := bad.RequestWith(ctx, s.client(t, 0, scram.Auth{User: "admin", Pass: adminPass}.AsSha512Mechanism()))
	if err != nil || len(badResp.Results) != 1 || badResp.Results[0].ErrorCode != kerr.UnacceptableCredential.Code {
		t.Fatalf("bob with 1000 iterations: %v %+v, want UNACCEPTABLE_CREDENTIAL", err, badResp)
	}
	// Gateway 1 dropped its cached absence on the coordinator's NATS notice: alice
	// authenticates there well before the 10 s cache TTL would have let her.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := s.metadataErr(t, 1, alice512)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice on the second gateway after the change: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}

	described, err := adm.DescribeUserSCRAMs(ctx, "alice", "bob")
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	if a := described["alice"]; a.Err != nil || len(a.CredInfos) != 2 {
		t.Fatalf("describe alice: %+v", a)
	}
	if b := described["bob"]; !errors.Is(b.Err, kerr.ResourceNotFound) {
		t.Fatalf("describe bob: %+v, want RESOURCE_NOT_FOUND", b)
	}

	// Metadata on SASL_SSL lists both gateways' SASL_SSL endpoints.
	md, err := kadm.NewClient(s.client(t, 0, alice512)).BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range md.Brokers {
		got = append(got, net.JoinHostPort(b.Host, fmt.Sprint(b.Port)))
	}
	sort.Strings(got)
	want := append([]string(nil), s.ListenerAddrs["SASL_SSL"]...)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("SASL_SSL metadata brokers %v, want %v", got, want)
	}

	// kgo produce and consume with each mechanism.
	topic := topicName("sasl")
	createTopic(t, adm, topic, 3, nil)
	for _, m := range []sasl.Mechanism{alice512, scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha256Mechanism(), plain.Auth{User: "alice", Pass: "alice-pw"}.AsMechanism()} {
		cl := s.client(t, 1, m, kgo.DefaultProduceTopic(topic))
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(m.Name()), Value: []byte("kgo")}).FirstErr(); err != nil {
			t.Fatalf("kgo %s produce: %v", m.Name(), err)
		}
	}
	cons := s.client(t, 0, alice512, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var recs []*kgo.Record
	for len(recs) < 3 {
		fs := cons.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("kgo consume: %v", err)
		}
		recs = append(recs, fs.Records()...)
	}
	if len(recs) != 3 {
		t.Fatalf("kgo consumed %d records, want 3", len(recs))
	}

	// kcat (librdkafka) over SASL_SSL.
	kcat := testenv.RequireBinary(t, "kcat")
	for _, mech := range []string{"SCRAM-SHA-512", "PLAIN"} {
		kt := topicName("kcat-sasl")
		conf := []string{"-b", s.ListenerAddrs["SASL_SSL"][0], "-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location=" + s.ca.CertFile,
			"-X", "sasl.mechanism=" + mech, "-X", "sasl.username=alice", "-X", "sasl.password=alice-pw"}
		lines := []string{"one", "two", "three"}
		runKcatInput(t, kcat, strings.Join(lines, "\n")+"\n", append([]string{"-P", "-t", kt, "-X", "acks=all"}, conf...)...)
		out := runKcatInput(t, kcat, "", append([]string{"-C", "-t", kt, "-o", "beginning", "-c", "3", "-e", "-q"}, conf...)...)
		if got := strings.Fields(out); strings.Join(got, ",") != "one,two,three" {
			t.Fatalf("kcat %s consumed %q", mech, out)
		}
	}
	// kcat with a wrong password fails authentication.
	badKcat := exec.CommandContext(ctx, kcat, "-L", "-b", s.ListenerAddrs["SASL_SSL"][0], "-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location="+s.ca.CertFile,
		"-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=alice", "-X", "sasl.password=wrong", "-m", "5")
	out, err := badKcat.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "SASL authentication error: authentication failed: invalid credentials") {
		t.Fatalf("kcat with a wrong password: %v\n%s", err, out)
	}

	// A wrong password over kgo, and the raw connection closed after the answer.
	if err := s.metadataErr(t, 0, scram.Auth{User: "alice", Pass: "wrong"}.AsSha512Mechanism()); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("kgo wrong password: %v", err)
	}
	checkRawFailureCloses(t, s)

	// Deleting alice's credentials: she no longer authenticates on either gateway.
	del, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "alice", Mechanism: kadm.ScramSha512}, {User: "alice", Mechanism: kadm.ScramSha256}}, nil)
	if err != nil || del["alice"].Err != nil {
		t.Fatalf("delete alice: %v %+v", err, del)
	}
	for i := range 2 {
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := s.metadataErr(t, i, alice512)
			if errors.Is(err, kerr.SaslAuthenticationFailed) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("deleted alice on gateway %d: %v, want SASL_AUTHENTICATION_FAILED", i, err)
			}
			time.Sleep(50 * time.Millisecond) // poll interval
		}
	}
}

// runKcatInput runs kcat with stdin and returns its stdout, failing the test on error.
func runKcatInput(t *testing.T, kcat, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// rawTLS opens a TLS connection to a SASL_SSL listener.
func rawTLS(t *testing.T, s *saslStack, i int) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c, err := tls.Dial("tcp", s.ListenerAddrs["SASL_SSL"][i], s.tls)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

func writeReq(t *testing.T, w io.Writer, req kmsg.Request, corr int32) {
	t.Helper()
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 3)
	b = append(b, "e2e"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
}

// readResp reads one non-flexible-header response into resp.
func readResp(r *bufio.Reader, resp kmsg.Response) error {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return err
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(r, buf); err != nil {
		return err
	}
	return resp.ReadFrom(buf[4:])
}

// closedAfter reports whether the server closes r's connection (EOF or reset).
func closedAfter(r *bufio.Reader) bool {
	_, err := r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// checkRawFailureCloses: over TLS, a bad PLAIN password is answered
// SASL_AUTHENTICATION_FAILED and the connection is closed; a Metadata before
// SaslHandshake closes the connection without an answer.
func checkRawFailureCloses(t *testing.T, s *saslStack) {
	t.Helper()
	c, r := rawTLS(t, s, 0)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	writeReq(t, c, hs, 1)
	hr := kmsg.NewPtrSASLHandshakeResponse()
	hr.Version = 1
	if err := readResp(r, hr); err != nil || hr.ErrorCode != 0 {
		t.Fatalf("handshake: %v %d", err, hr.ErrorCode)
	}
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.Version, au.SASLAuthBytes = 1, []byte("\x00admin\x00wrong")
	writeReq(t, c, au, 2)
	ar := kmsg.NewPtrSASLAuthenticateResponse()
	ar.Version = 1
	if err := readResp(r, ar); err != nil || ar.ErrorCode != kerr.SaslAuthenticationFailed.Code {
		t.Fatalf("authenticate with a wrong password: %v code %d", err, ar.ErrorCode)
	}
	if !closedAfter(r) {
		t.Fatal("connection open after SASL_AUTHENTICATION_FAILED")
	}

	c, r = rawTLS(t, s, 1)
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 1
	writeReq(t, c, md, 1)
	if !closedAfter(r) {
		t.Fatal("Metadata before authentication was served")
	}
}
