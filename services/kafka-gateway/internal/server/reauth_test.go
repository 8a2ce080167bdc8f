package server

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tributary/tributary/services/kafka-gateway/internal/sasl"
)

// plainAuth runs SaslHandshake v1 + SaslAuthenticate v1 with PLAIN on rc.
func plainAuth(t *testing.T, rc *rawConn, corr int32, user, pass string) *kmsg.SASLAuthenticateResponse {
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
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.Version, au.SASLAuthBytes = 1, []byte("\x00"+user+"\x00"+pass)
	rc.send(au, corr+1)
	ar := au.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	ar.Version = 1
	decodeAs(t, rc, ar, false)
	return ar
}

// TestReauthentication (KIP-368): the session lifetime is connections.max.reauth.ms;
// a re-authentication with the same principal renews it, one with another principal
// fails and closes the connection, and a connection that does not re-authenticate is
// closed at its first request past the lifetime.
func TestReauthentication(t *testing.T) {
	const lifetime = 300 * time.Millisecond
	s := startSecure(t, func(c *Config) { c.ConnectionsMaxReauth = lifetime })
	addr := s.srv.ListenerAddr("SASL_PLAINTEXT")

	rc := dialRaw(t, addr)
	ar := plainAuth(t, rc, 1, "alice", "alice-secret")
	if ar.ErrorCode != 0 || ar.SessionLifetimeMillis != lifetime.Milliseconds() {
		t.Fatalf("authenticate: code %d lifetime %d, want %d", ar.ErrorCode, ar.SessionLifetimeMillis, lifetime.Milliseconds())
	}
	if ar = plainAuth(t, rc, 3, "alice", "alice-secret"); ar.ErrorCode != 0 || ar.SessionLifetimeMillis != lifetime.Milliseconds() {
		t.Fatalf("re-authenticate: code %d lifetime %d", ar.ErrorCode, ar.SessionLifetimeMillis)
	}
	// Requests are served until the lifetime is over, then the connection is closed.
	served, deadline := 0, time.Now().Add(20*time.Second)
	for corr := int32(10); ; corr++ {
		md := kmsg.NewPtrMetadataRequest()
		md.Version = 1
		rc.send(md, corr)
		if _, _, err := rc.recv(false); err != nil {
			break
		}
		served++
		if time.Now().After(deadline) {
			t.Fatal("connection still served 20 s after its session lifetime")
		}
		time.Sleep(20 * time.Millisecond) // request interval
	}
	if served == 0 {
		t.Fatal("no request served within the session lifetime")
	}

	rc = dialRaw(t, addr)
	if ar := plainAuth(t, rc, 1, "alice", "alice-secret"); ar.ErrorCode != 0 {
		t.Fatalf("authenticate: %d", ar.ErrorCode)
	}
	if ar := plainAuth(t, rc, 3, "bob", "bob-secret"); ar.ErrorCode != kerr.SaslAuthenticationFailed.Code {
		t.Fatalf("re-authenticate as bob: %d, want SASL_AUTHENTICATION_FAILED", ar.ErrorCode)
	}
	if !rc.closed() {
		t.Fatal("connection open after a re-authentication with another principal")
	}
}

// TestKgoReauthenticates: kgo, told a 400 ms session lifetime, re-authenticates on its
// own and keeps producing past several lifetimes.
func TestKgoReauthenticates(t *testing.T) {
	s := startSecure(t, func(c *Config) { c.ConnectionsMaxReauth = 400 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.srv.ListenerAddr("SASL_PLAINTEXT")),
		kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism()),
		kgo.DefaultProduceTopic("reauth"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
		time.Sleep(150 * time.Millisecond) // spread the records over several session lifetimes
	}
}
