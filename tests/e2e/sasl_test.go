package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
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

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	xdgscram "github.com/xdg-go/scram"

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
		GatewayFlags: []string{"--tls-cert", cert, "--tls-key", key, "--sasl-users-file", users, "--sasl-oauthbearer-unsecured"},
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
	// One mechanism a request: Kafka 4 refuses a user altered twice in one request.
	both, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: "alice-pw"},
		{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "alice-pw"},
	})
	if err != nil || !errors.Is(both["alice"].Err, kerr.DuplicateResource) {
		t.Fatalf("alice's two mechanisms in one request: %v %+v, want DUPLICATE_RESOURCE", err, both)
	}
	for _, up := range []kadm.UpsertSCRAM{
		{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: "alice-pw"},
		{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "alice-pw"},
	} {
		res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{up})
		if err != nil {
			t.Fatalf("alter scram: %v", err)
		}
		if r := res["alice"]; r.Err != nil {
			t.Fatalf("alice %v: %v", up.Mechanism, r.Err)
		}
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
	for _, m := range []kadm.ScramMechanism{kadm.ScramSha512, kadm.ScramSha256} {
		del, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "alice", Mechanism: m}}, nil)
		if err != nil || del["alice"].Err != nil {
			t.Fatalf("delete alice %v: %v %+v", m, err, del)
		}
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

// TestSASLOtherClients: OAUTHBEARER with kcat (librdkafka's unsecured JWT) and kgo,
// SCRAM-SHA-512 with Sarama and SCRAM-SHA-256 with kafkajs, each over SASL_SSL;
// each produces and consumes, and a wrong password fails.
func TestSASLOtherClients(t *testing.T) {
	s := startSASLStack(t)
	ctx := ctxT(t, 4*time.Minute)
	adm := s.admin(t, 0)
	if _, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "sam", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "sam-pw"},
		{User: "js", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "js-pw"},
	}); err != nil {
		t.Fatal(err)
	}
	addr := s.ListenerAddrs["SASL_SSL"][1]

	t.Run("kcat oauthbearer", func(t *testing.T) {
		kcat := testenv.RequireBinary(t, "kcat")
		kt := topicName("kcat-oauth")
		conf := []string{"-b", addr, "-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location=" + s.ca.CertFile,
			"-X", "sasl.mechanism=OAUTHBEARER", "-X", "enable.sasl.oauthbearer.unsecure.jwt=true", "-X", "sasl.oauthbearer.config=principal=olivia"}
		runKcatInput(t, kcat, "a\nb\n", append([]string{"-P", "-t", kt, "-X", "acks=all"}, conf...)...)
		out := runKcatInput(t, kcat, "", append([]string{"-C", "-t", kt, "-o", "beginning", "-c", "2", "-e", "-q"}, conf...)...)
		if got := strings.Fields(out); strings.Join(got, ",") != "a,b" {
			t.Fatalf("kcat OAUTHBEARER consumed %q", out)
		}
	})
	t.Run("kgo oauthbearer", func(t *testing.T) {
		enc := base64.RawURLEncoding.EncodeToString
		tok := enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(fmt.Sprintf(`{"sub":"olivia","exp":%d}`, time.Now().Add(time.Hour).Unix()))) + "."
		kt := topicName("kgo-oauth")
		cl := s.client(t, 1, oauth.Auth{Token: tok}.AsMechanism(), kgo.DefaultProduceTopic(kt), kgo.AllowAutoTopicCreation(),
			kgo.ConsumeTopics(kt), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("oauth")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		fs := cl.PollFetches(ctx)
		if fs.Err() != nil || len(fs.Records()) != 1 {
			t.Fatalf("consume: %v %d", fs.Err(), len(fs.Records()))
		}
	})
	t.Run("sarama scram-sha-512", func(t *testing.T) {
		topic := topicName("sarama-sasl")
		conf := func(pass string) *sarama.Config {
			c := sarama.NewConfig()
			c.Version = sarama.V3_0_0_0
			c.Net.TLS.Enable, c.Net.TLS.Config = true, s.tls
			c.Net.SASL.Enable, c.Net.SASL.Mechanism = true, sarama.SASLTypeSCRAMSHA512
			c.Net.SASL.User, c.Net.SASL.Password = "sam", pass
			c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &xdgSCRAM{hash: xdgscram.SHA512} }
			c.Producer.Return.Successes = true
			c.Producer.RequiredAcks = sarama.WaitForAll
			c.Metadata.AllowAutoTopicCreation = true
			return c
		}
		prod, err := sarama.NewSyncProducer([]string{addr}, conf("sam-pw"))
		if err != nil {
			t.Fatalf("sarama producer: %v", err)
		}
		for i := range 3 {
			if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprint("sarama-", i))}); err != nil {
				t.Fatalf("sarama send: %v", err)
			}
		}
		_ = prod.Close()
		cons, err := sarama.NewConsumer([]string{addr}, conf("sam-pw"))
		if err != nil {
			t.Fatalf("sarama consumer: %v", err)
		}
		defer cons.Close()
		pc, err := cons.ConsumePartition(topic, 0, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("sarama consume: %v", err)
		}
		defer pc.Close()
		for i := range 3 {
			select {
			case m := <-pc.Messages():
				if string(m.Value) != fmt.Sprint("sarama-", i) {
					t.Fatalf("sarama read %q", m.Value)
				}
			case <-ctx.Done():
				t.Fatal("sarama consumer: timed out")
			}
		}
		if _, err := sarama.NewClient([]string{addr}, conf("wrong")); err == nil || !strings.Contains(err.Error(), "SASL") {
			t.Fatalf("sarama with a wrong password: %v", err)
		}
	})
	t.Run("kafkajs scram-sha-256", func(t *testing.T) {
		node, dir := nodeScript(ctx, t, filepath.Join("kafkajs", "sasl.js"), "kafkajs@"+kafkajsVersion)
		topic := topicName("kjs-sasl")
		createTopic(t, adm, topic, 1, nil)
		cmd := exec.CommandContext(ctx, node, "sasl.js")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "BROKERS="+addr, "TOPIC="+topic, "GROUP="+topicName("kjs-sasl-group"), "COUNT=3",
			"CA_FILE="+s.ca.CertFile, "MECHANISM=scram-sha-256", "USERNAME=js", "PASSWORD=js-pw", "TIMEOUT_MS=120000")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("kafkajs: %v\n%s", err, tailString(stderr.String(), 4000))
		}
		var res struct {
			Consumed      []string `json:"consumed"`
			WrongPassword string   `json:"wrongPassword"`
		}
		if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil {
			t.Fatalf("kafkajs output %q: %v", stdout.String(), err)
		}
		sort.Strings(res.Consumed)
		if strings.Join(res.Consumed, ",") != "kafkajs-0,kafkajs-1,kafkajs-2" {
			t.Fatalf("kafkajs consumed %v", res.Consumed)
		}
		if !strings.Contains(res.WrongPassword, "KafkaJSSASLAuthenticationError") {
			t.Fatalf("kafkajs with a wrong password: %s", res.WrongPassword)
		}
	})
}

// xdgSCRAM is Sarama's SCRAM client over github.com/xdg-go/scram (what Sarama's
// examples use).
type xdgSCRAM struct {
	hash xdgscram.HashGeneratorFcn
	conv *xdgscram.ClientConversation
}

func (x *xdgSCRAM) Begin(user, pass, authz string) error {
	cl, err := x.hash.NewClient(user, pass, authz)
	if err != nil {
		return err
	}
	x.conv = cl.NewConversation()
	return nil
}

func (x *xdgSCRAM) Step(challenge string) (string, error) { return x.conv.Step(challenge) }
func (x *xdgSCRAM) Done() bool                            { return x.conv.Done() }

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
