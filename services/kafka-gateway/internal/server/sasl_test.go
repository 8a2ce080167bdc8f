package server

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tributary/tributary/libs/tlsx"
	"github.com/tributary/tributary/libs/tlsx/tlsxtest"
	"github.com/tributary/tributary/services/kafka-gateway/internal/sasl"
)

// secureStack is a gateway with all four listeners and a users file holding alice.
type secureStack struct {
	*stack
	ca *tlsxtest.CA
}

func startSecure(t testing.TB, mod func(*Config)) *secureStack {
	t.Helper()
	ca := tlsxtest.NewCA(t)
	cert, key := ca.Issue(t, "gateway", "kafka-gateway")
	users := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(users, []byte("# test users\nalice:alice-secret\nbob:bob-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, func(c *Config) {
		c.Listeners = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
		c.TLS = tlsx.Server{CertFile: cert, KeyFile: key, ClientCAFile: ca.CertFile}
		c.SASLUsersFile = users
		if mod != nil {
			mod(c)
		}
	})
	return &secureStack{stack: s, ca: ca}
}

func (s *secureStack) tlsConfig(t testing.TB) *tls.Config {
	t.Helper()
	cfg, err := tlsx.Client{CAFile: s.ca.CertFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestListenersAdvertiseTheirOwnEndpoint: a client bootstrapped on each listener is
// told that listener's address in Metadata, FindCoordinator and DescribeCluster.
func TestListenersAdvertiseTheirOwnEndpoint(t *testing.T) {
	s := startSecure(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tlsCfg := s.tlsConfig(t)
	alice := scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()
	for _, tc := range []struct {
		listener string
		opts     []kgo.Opt
	}{
		{"PLAINTEXT", nil},
		{"SSL", []kgo.Opt{kgo.DialTLSConfig(tlsCfg)}},
		{"SASL_PLAINTEXT", []kgo.Opt{kgo.SASL(alice)}},
		{"SASL_SSL", []kgo.Opt{kgo.DialTLSConfig(tlsCfg), kgo.SASL(alice)}},
	} {
		addr := s.srv.ListenerAddr(tc.listener)
		host, portStr, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(portStr)
		cl, err := kgo.NewClient(append(tc.opts, kgo.SeedBrokers(addr))...)
		if err != nil {
			t.Fatal(err)
		}
		md := kmsg.NewPtrMetadataRequest()
		mresp, err := md.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("%s: metadata: %v", tc.listener, err)
		}
		if len(mresp.Brokers) != 1 || mresp.Brokers[0].Host != host || mresp.Brokers[0].Port != int32(port) {
			t.Errorf("%s: metadata brokers %+v, want %s", tc.listener, mresp.Brokers, addr)
		}
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorKey = "g"
		fresp, err := fc.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("%s: find coordinator: %v", tc.listener, err)
		}
		var fhost string
		var fport int32
		if len(fresp.Coordinators) == 1 {
			fhost, fport = fresp.Coordinators[0].Host, fresp.Coordinators[0].Port
		} else {
			fhost, fport = fresp.Host, fresp.Port
		}
		if fhost != host || fport != int32(port) {
			t.Errorf("%s: coordinator %s:%d, want %s", tc.listener, fhost, fport, addr)
		}
		dc := kmsg.NewPtrDescribeClusterRequest()
		dresp, err := dc.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("%s: describe cluster: %v", tc.listener, err)
		}
		if len(dresp.Brokers) != 1 || dresp.Brokers[0].Port != int32(port) {
			t.Errorf("%s: describe cluster brokers %+v, want %s", tc.listener, dresp.Brokers, addr)
		}
		cl.Close()
	}
}

// TestSASLMechanismsProduceConsume: kgo authenticates with each mechanism over
// SASL_SSL and SASL_PLAINTEXT and produces and consumes.
func TestSASLMechanismsProduceConsume(t *testing.T) {
	s := startSecure(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tlsCfg := s.tlsConfig(t)
	for i, tc := range []struct {
		name     string
		listener string
		mech     kgo.Opt
	}{
		{"scram-512 ssl", "SASL_SSL", kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism())},
		{"scram-256 ssl", "SASL_SSL", kgo.SASL(scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha256Mechanism())},
		{"plain ssl", "SASL_SSL", kgo.SASL(plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism())},
		{"scram-512 plaintext", "SASL_PLAINTEXT", kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism())},
	} {
		topic := "sasl-" + strconv.Itoa(i)
		opts := []kgo.Opt{kgo.SeedBrokers(s.srv.ListenerAddr(tc.listener)), tc.mech, kgo.DefaultProduceTopic(topic), kgo.ConsumeTopics(topic), kgo.AllowAutoTopicCreation()}
		if tc.listener == "SASL_SSL" {
			opts = append(opts, kgo.DialTLSConfig(tlsCfg))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(tc.name)}).FirstErr(); err != nil {
			t.Fatalf("%s: produce: %v", tc.name, err)
		}
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("%s: fetch: %v", tc.name, err)
		}
		if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != tc.name {
			t.Fatalf("%s: consumed %v", tc.name, recs)
		}
		cl.Close()
	}
}

// TestSASLWrongPasswordFails: a bad password or unknown user is
// SASL_AUTHENTICATION_FAILED for every mechanism.
func TestSASLWrongPasswordFails(t *testing.T) {
	s := startSecure(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range []kgo.Opt{
		kgo.SASL(scram.Auth{User: "alice", Pass: "wrong"}.AsSha512Mechanism()),
		kgo.SASL(scram.Auth{User: "nobody", Pass: "x"}.AsSha256Mechanism()),
		kgo.SASL(plain.Auth{User: "alice", Pass: "wrong"}.AsMechanism()),
	} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(s.srv.ListenerAddr("SASL_PLAINTEXT")), m, kgo.RequestRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Errorf("metadata with bad credentials: %v, want SASL_AUTHENTICATION_FAILED", err)
		}
		cl.Close()
	}
}

func decodeAs(t *testing.T, rc *rawConn, resp kmsg.Response, flexible bool) {
	t.Helper()
	_, body, err := rc.recv(flexible)
	if err != nil {
		t.Fatalf("recv %T: %v", resp, err)
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatalf("decode %T: %v", resp, err)
	}
}

// TestSASLStateMachine drives the SASL listener by hand: nothing but ApiVersions and
// the SASL APIs before authentication, a failure answered and closed, bare v0 tokens,
// an unknown mechanism, a replayed SCRAM nonce.
func TestSASLStateMachine(t *testing.T) {
	s := startSecure(t, nil)
	addr := s.srv.ListenerAddr("SASL_PLAINTEXT")

	t.Run("metadata before handshake closes", func(t *testing.T) {
		rc := dialRaw(t, addr)
		rc.send(kmsg.NewPtrMetadataRequest(), 1)
		if !rc.closed() {
			t.Fatal("connection still open after Metadata before authentication")
		}
	})
	t.Run("metadata after handshake before authenticate closes", func(t *testing.T) {
		rc := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, sasl.MechPlain
		rc.send(hs, 1)
		hr := hs.ResponseKind().(*kmsg.SASLHandshakeResponse)
		hr.Version = 1
		decodeAs(t, rc, hr, false)
		if hr.ErrorCode != 0 {
			t.Fatalf("handshake: %d", hr.ErrorCode)
		}
		rc.send(kmsg.NewPtrMetadataRequest(), 2)
		if !rc.closed() {
			t.Fatal("connection still open after Metadata during authentication")
		}
	})
	t.Run("unsupported mechanism", func(t *testing.T) {
		rc := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, "GSSAPI"
		rc.send(hs, 1)
		hr := hs.ResponseKind().(*kmsg.SASLHandshakeResponse)
		hr.Version = 1
		decodeAs(t, rc, hr, false)
		if hr.ErrorCode != kerr.UnsupportedSaslMechanism.Code || len(hr.SupportedMechanisms) != 3 {
			t.Fatalf("handshake GSSAPI: code %d mechanisms %v", hr.ErrorCode, hr.SupportedMechanisms)
		}
		if !rc.closed() {
			t.Fatal("connection still open after an unsupported mechanism")
		}
	})
	t.Run("authenticate without handshake", func(t *testing.T) {
		rc := dialRaw(t, addr)
		au := kmsg.NewPtrSASLAuthenticateRequest()
		au.Version, au.SASLAuthBytes = 1, []byte("\x00alice\x00alice-secret")
		rc.send(au, 1)
		ar := au.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		ar.Version = 1
		decodeAs(t, rc, ar, false)
		if ar.ErrorCode != kerr.IllegalSaslState.Code {
			t.Fatalf("authenticate without handshake: %d", ar.ErrorCode)
		}
		if !rc.closed() {
			t.Fatal("connection still open")
		}
	})
	t.Run("v0 bare PLAIN token", func(t *testing.T) {
		rc := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 0, sasl.MechPlain
		rc.send(hs, 1)
		hr := hs.ResponseKind().(*kmsg.SASLHandshakeResponse)
		decodeAs(t, rc, hr, false)
		if hr.ErrorCode != 0 {
			t.Fatalf("handshake v0: %d", hr.ErrorCode)
		}
		tok := []byte("\x00alice\x00alice-secret")
		rc.sendBytes(append([]byte{0, 0, 0, byte(len(tok))}, tok...))
		var size [4]byte
		if _, err := rc.r.Read(size[:]); err != nil || size != [4]byte{} {
			t.Fatalf("bare PLAIN answer %v %v, want an empty token", size, err)
		}
		md := kmsg.NewPtrMetadataRequest()
		md.Version = 1
		rc.send(md, 2)
		mr := md.ResponseKind().(*kmsg.MetadataResponse)
		mr.Version = 1
		decodeAs(t, rc, mr, false)
		if len(mr.Brokers) != 1 {
			t.Fatalf("metadata after v0 authentication: %+v", mr)
		}
	})
	t.Run("v0 bare PLAIN wrong password closes", func(t *testing.T) {
		rc := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 0, sasl.MechPlain
		rc.send(hs, 1)
		decodeAs(t, rc, hs.ResponseKind(), false)
		tok := []byte("\x00alice\x00nope")
		rc.sendBytes(append([]byte{0, 0, 0, byte(len(tok))}, tok...))
		if !rc.closed() {
			t.Fatal("connection still open after a failed bare PLAIN token")
		}
	})
	t.Run("replayed SCRAM nonce", func(t *testing.T) {
		rc := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, sasl.ScramSHA256
		rc.send(hs, 1)
		hr := hs.ResponseKind().(*kmsg.SASLHandshakeResponse)
		hr.Version = 1
		decodeAs(t, rc, hr, false)
		au := kmsg.NewPtrSASLAuthenticateRequest()
		au.Version, au.SASLAuthBytes = 1, []byte("n,,n=alice,r=clientnonce")
		rc.send(au, 2)
		ar := au.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		ar.Version = 1
		decodeAs(t, rc, ar, false)
		if ar.ErrorCode != 0 {
			t.Fatalf("client-first: %d", ar.ErrorCode)
		}
		// A client-final carrying only the client's nonce (as a replay of another
		// exchange would) instead of the server-extended one.
		au.SASLAuthBytes = []byte("c=biws,r=clientnonce,p=dGVzdA==")
		rc.send(au, 3)
		ar = au.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		ar.Version = 1
		decodeAs(t, rc, ar, false)
		if ar.ErrorCode != kerr.SaslAuthenticationFailed.Code {
			t.Fatalf("replayed nonce: %d, want SASL_AUTHENTICATION_FAILED", ar.ErrorCode)
		}
		if !rc.closed() {
			t.Fatal("connection still open after a failed SCRAM exchange")
		}
	})
	t.Run("plaintext listener answers ILLEGAL_SASL_STATE and stays open", func(t *testing.T) {
		rc := dialRaw(t, s.srv.ListenerAddr("PLAINTEXT"))
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, sasl.MechPlain
		rc.send(hs, 1)
		hr := hs.ResponseKind().(*kmsg.SASLHandshakeResponse)
		hr.Version = 1
		decodeAs(t, rc, hr, false)
		if hr.ErrorCode != kerr.IllegalSaslState.Code {
			t.Fatalf("handshake on PLAINTEXT: %d", hr.ErrorCode)
		}
		rc.send(kmsg.NewPtrApiVersionsRequest(), 2)
		decodeAs(t, rc, kmsg.NewPtrApiVersionsResponse(), false)
	})
}

// TestPeersAdvertiseTheSameListener: two replicas with PLAINTEXT and SASL_PLAINTEXT
// listeners learn each other's listeners over NATS; a client on SASL_PLAINTEXT is sent
// to SASL_PLAINTEXT on both, one on PLAINTEXT to PLAINTEXT on both.
func TestPeersAdvertiseTheSameListener(t *testing.T) {
	u := testNATSURL(t)
	clusterID := "kgwlisteners-" + time.Now().Format("150405.000000000")
	a := startSecure(t, func(c *Config) {
		c.NATSURL, c.ClusterID, c.NodeID = u, clusterID, 0
		c.Listeners = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
	})
	b := startSecure(t, func(c *Config) {
		c.NATSURL, c.ClusterID, c.NodeID = u, clusterID, 1
		c.Listeners = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, listener := range []string{"PLAINTEXT", "SASL_PLAINTEXT"} {
		want := map[int32]string{0: a.srv.ListenerAddr(listener), 1: b.srv.ListenerAddr(listener)}
		opts := []kgo.Opt{kgo.SeedBrokers(want[0])}
		if listener == "SASL_PLAINTEXT" {
			opts = append(opts, kgo.SASL(plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism()))
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
			cl.Close()
			got := map[int32]string{}
			if err == nil {
				for _, br := range resp.Brokers {
					got[br.NodeID] = net.JoinHostPort(br.Host, strconv.Itoa(int(br.Port)))
				}
			}
			if len(got) == 2 && got[0] == want[0] && got[1] == want[1] {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: brokers %v (%v), want %v", listener, got, err, want)
			}
			time.Sleep(20 * time.Millisecond) // poll interval
		}
	}
}

// TestOAuthBearerUnsecured: kgo authenticates with an unsecured token as its subject
// on SASL_SSL; an expired token fails.
func TestOAuthBearerUnsecured(t *testing.T) {
	s := startSecure(t, func(c *Config) { c.OAuthBearerUnsecured = true })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	enc := base64.RawURLEncoding.EncodeToString
	token := func(exp time.Time) string {
		return enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(fmt.Sprintf(`{"sub":"carol","exp":%d}`, exp.Unix()))) + "."
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.srv.ListenerAddr("SASL_SSL")), kgo.DialTLSConfig(s.tlsConfig(t)),
		kgo.SASL(oauth.Auth{Token: token(time.Now().Add(time.Hour))}.AsMechanism()),
		kgo.DefaultProduceTopic("oauth"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce with a token: %v", err)
	}
	bad, err := kgo.NewClient(kgo.SeedBrokers(s.srv.ListenerAddr("SASL_SSL")), kgo.DialTLSConfig(s.tlsConfig(t)),
		kgo.SASL(oauth.Auth{Token: token(time.Now().Add(-time.Hour))}.AsMechanism()), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, bad); err == nil {
		t.Fatal("an expired token authenticated")
	}
}
