package server

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/tributary/tributary/libs/tlsx"
	"github.com/tributary/tributary/libs/tlsx/tlsxtest"
	"github.com/tributary/tributary/services/kafka-gateway/internal/handler"
	"github.com/tributary/tributary/services/kafka-gateway/internal/sasl"
)

// bystander produces with kgo over SASL_PLAINTEXT until stop is called and fails the
// test if any produce fails: a misbehaving client must not affect another one.
func bystander(t *testing.T, s *secureStack) (stop func()) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.srv.ListenerAddr("SASL_PLAINTEXT")),
		kgo.SASL(plain.Auth{User: "bob", Pass: "bob-secret"}.AsMechanism()),
		kgo.DefaultProduceTopic("bystander"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg       sync.WaitGroup
		produced atomic.Int64
		failure  atomic.Pointer[error]
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			err := cl.ProduceSync(pctx, &kgo.Record{Value: []byte("still served")}).FirstErr()
			pcancel()
			if err != nil {
				if ctx.Err() == nil {
					failure.Store(&err)
				}
				return
			}
			produced.Add(1)
			time.Sleep(20 * time.Millisecond) // produce interval
		}
	}()
	return func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); produced.Load() == 0 && failure.Load() == nil && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond) // poll interval
		}
		cancel()
		wg.Wait()
		cl.Close()
		if e := failure.Load(); e != nil {
			t.Fatalf("the well-behaved client failed meanwhile: %v", *e)
		}
		if produced.Load() == 0 {
			t.Fatal("the well-behaved client produced nothing meanwhile")
		}
	}
}

// closedWithin reports whether the server closes rc within d.
func closedWithin(rc *rawConn, d time.Duration) bool {
	_ = rc.c.SetReadDeadline(time.Now().Add(d))
	_, err := rc.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestSASLFrameLimitBeforeAuthentication: before a connection is authenticated (and
// while it re-authenticates) a frame is at most 512 KiB, Kafka's
// sasl.server.max.receive.size default: a larger size prefix, a 100 MB one included,
// closes the connection at once, without waiting for (or holding memory for) the body.
// After authentication the usual frame limit applies.
func TestSASLFrameLimitBeforeAuthentication(t *testing.T) {
	s := startSecure(t, nil)
	addr := s.srv.ListenerAddr("SASL_PLAINTEXT")
	stop := bystander(t, s)

	oversize := func(n uint32) []byte {
		b := binary.BigEndian.AppendUint32(nil, n)
		b = binary.BigEndian.AppendUint16(b, uint16(kmsg.ApiVersions.Int16()))
		return append(b, 0, 3, 0, 0, 0, 1, 0, 0) // version, correlation id, client id
	}
	t.Run("100 MB prefix before the handshake", func(t *testing.T) {
		rc := dialRaw(t, addr)
		rc.sendBytes(oversize(100 << 20))
		if !closedWithin(rc, 3*time.Second) {
			t.Fatal("connection still open 3 s after a 100 MB frame prefix before authentication")
		}
	})
	t.Run("just over 512 KiB after the handshake", func(t *testing.T) {
		rc := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, sasl.MechPlain
		rc.send(hs, 1)
		decodeAs(t, rc, hs.ResponseKind(), false)
		rc.sendBytes(oversize(512<<10 + 1))
		if !closedWithin(rc, 3*time.Second) {
			t.Fatal("connection still open after a 512 KiB + 1 frame during authentication")
		}
	})
	t.Run("bare v0 token of 1 MiB", func(t *testing.T) {
		rc := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 0, sasl.MechPlain
		rc.send(hs, 1)
		decodeAs(t, rc, hs.ResponseKind(), false)
		rc.sendBytes(binary.BigEndian.AppendUint32(nil, 1<<20))
		if !closedWithin(rc, 3*time.Second) {
			t.Fatal("connection still open after a 1 MiB bare token prefix")
		}
	})
	t.Run("a 512 KiB SaslAuthenticate is read and refused", func(t *testing.T) {
		rc := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, sasl.MechPlain
		rc.send(hs, 1)
		decodeAs(t, rc, hs.ResponseKind(), false)
		au := kmsg.NewPtrSASLAuthenticateRequest()
		au.Version = 1
		au.SASLAuthBytes = append([]byte("\x00alice\x00"), make([]byte, 500<<10)...)
		rc.send(au, 2)
		ar := au.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		ar.Version = 1
		decodeAs(t, rc, ar, false)
		if ar.ErrorCode != kerr.SaslAuthenticationFailed.Code {
			t.Fatalf("500 KiB PLAIN message: %d, want SASL_AUTHENTICATION_FAILED", ar.ErrorCode)
		}
	})
	t.Run("authenticated connections keep the frame limit", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism()),
			kgo.DefaultProduceTopic("big"), kgo.AllowAutoTopicCreation(), kgo.ProducerBatchCompression(kgo.NoCompression()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: make([]byte, 800<<10)}).FirstErr(); err != nil {
			t.Fatalf("800 KiB record after authentication: %v", err)
		}
	})
	stop()
}

// TestReauthenticationServesNothingElse (KIP-368): once a re-authentication has begun
// (SaslHandshake v1 on an authenticated connection) only its SaslAuthenticate is
// served, as Kafka's SaslServerAuthenticator does; any other request closes the
// connection. Beginning one therefore never extends an expired session.
func TestReauthenticationServesNothingElse(t *testing.T) {
	const lifetime = 300 * time.Millisecond
	s := startSecure(t, func(c *Config) { c.ConnectionsMaxReauth = lifetime })
	addr := s.srv.ListenerAddr("SASL_PLAINTEXT")
	reauthHandshake := func(rc *rawConn, corr int32) {
		t.Helper()
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, sasl.MechPlain
		rc.send(hs, corr)
		hr := hs.ResponseKind().(*kmsg.SASLHandshakeResponse)
		hr.Version = 1
		decodeAs(t, rc, hr, false)
		if hr.ErrorCode != 0 {
			t.Fatalf("re-authentication handshake: %d", hr.ErrorCode)
		}
	}
	metadata := func(rc *rawConn, corr int32) {
		md := kmsg.NewPtrMetadataRequest()
		md.Version = 1
		rc.send(md, corr)
	}

	t.Run("expired session, handshake, then requests", func(t *testing.T) {
		rc := dialRaw(t, addr)
		if ar := plainAuth(t, rc, 1, "alice", "alice-secret"); ar.ErrorCode != 0 {
			t.Fatalf("authenticate: %d", ar.ErrorCode)
		}
		time.Sleep(lifetime + 200*time.Millisecond) // past the session lifetime
		reauthHandshake(rc, 3)
		metadata(rc, 4)
		if _, _, err := rc.recv(false); err == nil {
			t.Fatal("Metadata served on an expired session that only began re-authenticating")
		}
	})
	t.Run("live session, handshake, then a request", func(t *testing.T) {
		rc := dialRaw(t, addr)
		if ar := plainAuth(t, rc, 1, "alice", "alice-secret"); ar.ErrorCode != 0 {
			t.Fatalf("authenticate: %d", ar.ErrorCode)
		}
		reauthHandshake(rc, 3)
		metadata(rc, 4)
		if !rc.closed() {
			t.Fatal("connection open after a request in the middle of a re-authentication")
		}
	})
	t.Run("completed re-authentication serves again", func(t *testing.T) {
		rc := dialRaw(t, addr)
		if ar := plainAuth(t, rc, 1, "alice", "alice-secret"); ar.ErrorCode != 0 {
			t.Fatalf("authenticate: %d", ar.ErrorCode)
		}
		if ar := plainAuth(t, rc, 3, "alice", "alice-secret"); ar.ErrorCode != 0 {
			t.Fatalf("re-authenticate: %d", ar.ErrorCode)
		}
		metadata(rc, 5)
		if _, _, err := rc.recv(false); err != nil {
			t.Fatalf("Metadata after re-authentication: %v", err)
		}
	})
}

// TestApiVersionsOnlyBeforeHandshake: ApiVersions is served before SaslHandshake, but
// once a mechanism is chosen, and during a re-authentication, it closes the connection
// unanswered, as Kafka's SaslServerAuthenticator ends one that sends anything but
// SaslAuthenticate then.
func TestApiVersionsOnlyBeforeHandshake(t *testing.T) {
	s := startSecure(t, nil)
	addr := s.srv.ListenerAddr("SASL_PLAINTEXT")
	versions := func(rc *rawConn, corr int32) {
		av := kmsg.NewPtrApiVersionsRequest()
		av.Version = 3
		av.ClientSoftwareName, av.ClientSoftwareVersion = "test", "1"
		rc.send(av, corr)
	}
	handshake := func(rc *rawConn, corr int32) {
		t.Helper()
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, sasl.MechPlain
		rc.send(hs, corr)
		hr := hs.ResponseKind().(*kmsg.SASLHandshakeResponse)
		hr.Version = 1
		decodeAs(t, rc, hr, false)
		if hr.ErrorCode != 0 {
			t.Fatalf("handshake: %d", hr.ErrorCode)
		}
	}

	t.Run("before the handshake it is served", func(t *testing.T) {
		rc := dialRaw(t, addr)
		versions(rc, 1)
		if _, _, err := rc.recv(false); err != nil {
			t.Fatalf("ApiVersions before SaslHandshake: %v", err)
		}
		handshake(rc, 2)
	})
	t.Run("after the handshake it closes", func(t *testing.T) {
		rc := dialRaw(t, addr)
		handshake(rc, 1)
		versions(rc, 2)
		if !rc.closed() {
			t.Fatal("connection open after ApiVersions between SaslHandshake and SaslAuthenticate")
		}
	})
	t.Run("during a re-authentication it closes", func(t *testing.T) {
		rc := dialRaw(t, addr)
		if ar := plainAuth(t, rc, 1, "alice", "alice-secret"); ar.ErrorCode != 0 {
			t.Fatalf("authenticate: %d", ar.ErrorCode)
		}
		versions(rc, 3)
		if _, _, err := rc.recv(false); err != nil {
			t.Fatalf("ApiVersions on an authenticated connection: %v", err)
		}
		handshake(rc, 4)
		versions(rc, 5)
		if !rc.closed() {
			t.Fatal("connection open after ApiVersions in the middle of a re-authentication")
		}
	})
}

// TestOAuthBearerTokenExpiryEndsSession: with connections.max.reauth.ms off (0, the
// default) a token's exp still bounds the session, as Kafka's SaslServerAuthenticator
// bounds it: session_lifetime_ms is the time left, and the first request after it
// closes the connection.
func TestOAuthBearerTokenExpiryEndsSession(t *testing.T) {
	s := startSecure(t, func(c *Config) { c.OAuthBearerUnsecured = true })
	rc := dialRaw(t, s.srv.ListenerAddr("SASL_PLAINTEXT"))
	exp := time.Now().Add(1500 * time.Millisecond)
	enc := base64.RawURLEncoding.EncodeToString
	token := enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(fmt.Sprintf(`{"sub":"carol","exp":%.3f}`, float64(exp.UnixMilli())/1000))) + "."

	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, sasl.MechOAuthBearer
	rc.send(hs, 1)
	decodeAs(t, rc, hs.ResponseKind(), false)
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.Version, au.SASLAuthBytes = 1, []byte("n,,\x01auth=Bearer "+token+"\x01\x01")
	rc.send(au, 2)
	ar := au.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	ar.Version = 1
	decodeAs(t, rc, ar, false)
	if ar.ErrorCode != 0 || ar.SessionLifetimeMillis <= 0 || ar.SessionLifetimeMillis > 1500 {
		t.Fatalf("authenticate: code %d session_lifetime_ms %d, want 0 and (0, 1500]", ar.ErrorCode, ar.SessionLifetimeMillis)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 1
	rc.send(md, 3)
	if _, _, err := rc.recv(false); err != nil {
		t.Fatalf("Metadata while the token is valid: %v", err)
	}
	time.Sleep(time.Until(exp) + 200*time.Millisecond) // past the token's exp
	rc.send(md, 4)
	if _, _, err := rc.recv(false); err == nil {
		t.Fatal("Metadata served after the token expired")
	}
}

// TestTLSListenerRefusesBadClients: on an SSL listener requiring client certificates,
// a certificate of another CA, an expired one, none at all, and Kafka frames in clear
// are each refused in the TLS handshake and the connection closed, with no Kafka
// request served; a certificate of the configured CA is served; another client is
// served throughout.
func TestTLSListenerRefusesBadClients(t *testing.T) {
	s := startSecure(t, func(c *Config) { c.TLS.ClientAuth = tlsx.ClientAuthRequired })
	addr := s.srv.ListenerAddr("SSL")
	stop := bystander(t, s)
	other := tlsxtest.NewCA(t)
	clientCfg := func(ca *tlsxtest.CA, issue func(*tlsxtest.CA, testing.TB, string, string) (string, string)) *tls.Config {
		cfg := s.tlsConfig(t)
		if ca != nil {
			certFile, keyFile := issue(ca, t, "client", "mallory")
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		return cfg
	}
	// apiVersions reports whether an ApiVersions request is answered over TLS with cfg.
	apiVersions := func(cfg *tls.Config) bool {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return false // TLS 1.2 reports the refusal in the handshake
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(reqFrame(kmsg.NewPtrApiVersionsRequest(), 3, 1)); err != nil {
			return false
		}
		var size [4]byte
		_, err = io.ReadFull(c, size[:]) // TLS 1.3 reports it at the first read
		return err == nil
	}
	if !apiVersions(clientCfg(s.ca, (*tlsxtest.CA).Issue)) {
		t.Fatal("a certificate of the configured CA is not served")
	}
	for name, cfg := range map[string]*tls.Config{
		"another CA's certificate": clientCfg(other, (*tlsxtest.CA).Issue),
		"an expired certificate":   clientCfg(s.ca, (*tlsxtest.CA).IssueExpired),
		"no certificate":           clientCfg(nil, nil),
	} {
		for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			cfg := cfg.Clone()
			cfg.MinVersion, cfg.MaxVersion = v, v
			if apiVersions(cfg) {
				t.Errorf("%s (TLS version %x): served", name, v)
			}
		}
	}
	t.Run("Kafka frames in clear", func(t *testing.T) {
		rc := dialRaw(t, addr)
		rc.sendBytes(reqFrame(kmsg.NewPtrApiVersionsRequest(), 3, 1))
		_ = rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(rc.r)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("connection still open 5 s after Kafka frames in clear on the SSL port")
		}
		if len(got) > 0 && got[0] != 0x15 { // a TLS alert record at most
			t.Fatalf("answered %x to a frame in clear", got)
		}
	})
	stop()
}

// TestEveryAPIBeforeAuthenticationCloses: on a SASL listener every API but ApiVersions,
// SaslHandshake and SaslAuthenticate, at every version we serve, closes the connection
// unanswered when sent before authentication, as Kafka's SaslServerAuthenticator does.
func TestEveryAPIBeforeAuthenticationCloses(t *testing.T) {
	s := startSecure(t, nil)
	addr := s.srv.ListenerAddr("SASL_PLAINTEXT")
	stop := bystander(t, s)
	for _, k := range handler.APIKeys() {
		switch k.ApiKey {
		case kmsg.ApiVersions.Int16(), kmsg.SASLHandshake.Int16(), kmsg.SASLAuthenticate.Int16():
			continue
		}
		for _, v := range []int16{k.MinVersion, k.MaxVersion} {
			req := kmsg.RequestForKey(k.ApiKey)
			req.SetVersion(v)
			rc := dialRaw(t, addr)
			rc.send(req, 7)
			_ = rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, _, err := rc.recv(false)
			var ne net.Error
			switch {
			case err == nil:
				t.Errorf("%s v%d answered before authentication", kmsg.NameForKey(k.ApiKey), v)
			case errors.As(err, &ne) && ne.Timeout():
				t.Errorf("%s v%d before authentication: connection still open after 5 s", kmsg.NameForKey(k.ApiKey), v)
			}
			_ = rc.c.Close()
		}
	}
	stop()
}

// TestUnauthenticatedFramesTakeNoRequestMemory: frames read before authentication are
// not counted in the request memory budget (--max-inflight-request-bytes), as Kafka
// reads them outside its memory pool: clients that announce frames they never send,
// without authenticating, cannot make an authenticated client wait.
func TestUnauthenticatedFramesTakeNoRequestMemory(t *testing.T) {
	s := startSecure(t, func(c *Config) { c.MaxInFlightBytes = 1 << 20 })
	addr := s.srv.ListenerAddr("SASL_PLAINTEXT")
	for range 4 {
		rc := dialRaw(t, addr)
		b := binary.BigEndian.AppendUint32(nil, 256<<10) // four fill the budget
		b = binary.BigEndian.AppendUint16(b, uint16(kmsg.ApiVersions.Int16()))
		rc.sendBytes(append(b, 0, 3, 0, 0, 0, 1, 0, 0)) // and nothing more
	}
	time.Sleep(100 * time.Millisecond) // the stalled frames are being read
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(plain.Auth{User: "bob", Pass: "bob-secret"}.AsMechanism()),
		kgo.DefaultProduceTopic("budget"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("authenticated produce while unauthenticated clients stall frames: %v", err)
	}
}
