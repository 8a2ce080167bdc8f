package tlsx_test

import (
	"crypto/tls"
	"errors"
	"io"
	"testing"

	"github.com/tributary/tributary/libs/tlsx"
	"github.com/tributary/tributary/libs/tlsx/tlsxtest"
)

// TestMutualTLS: a server requiring client certificates accepts a client with one signed
// by its CA and refuses one without.
func TestMutualTLS(t *testing.T) {
	ca := tlsxtest.NewCA(t)
	scert, skey := ca.Issue(t, "server", "storage-core")
	ccert, ckey := ca.Issue(t, "client", "kafka-gateway")
	srvCfg, err := tlsx.Server{CertFile: scert, KeyFile: skey, ClientCAFile: ca.CertFile, ClientAuth: tlsx.ClientAuthRequired}.Config()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	names := make(chan string, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if err := tc.Handshake(); err != nil {
				names <- "refused"
			} else {
				names <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
				_, _ = io.WriteString(tc, "ok")
			}
			tc.Close()
		}
	}()
	dial := func(c tlsx.Client) error {
		cfg, err := c.Config()
		if err != nil {
			return err
		}
		conn, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = io.ReadAll(conn)
		return err
	}
	if err := dial(tlsx.Client{CAFile: ca.CertFile, CertFile: ccert, KeyFile: ckey}); err != nil {
		t.Fatalf("client with certificate: %v", err)
	}
	if got := <-names; got != "kafka-gateway" {
		t.Fatalf("server saw %q, want the client's common name", got)
	}
	_ = dial(tlsx.Client{CAFile: ca.CertFile})
	if got := <-names; got != "refused" {
		t.Fatalf("client without certificate: server saw %q, want refused", got)
	}
}

func TestConfigErrors(t *testing.T) {
	ca := tlsxtest.NewCA(t)
	scert, skey := ca.Issue(t, "server", "x")
	for name, s := range map[string]tlsx.Server{
		"no key":        {CertFile: scert},
		"swapped":       {CertFile: skey, KeyFile: scert},
		"auth no CA":    {CertFile: scert, KeyFile: skey, ClientAuth: tlsx.ClientAuthRequired},
		"unknown mode":  {CertFile: scert, KeyFile: skey, ClientCAFile: ca.CertFile, ClientAuth: "sometimes"},
		"CA not PEM":    {CertFile: scert, KeyFile: skey, ClientCAFile: skey, ClientAuth: tlsx.ClientAuthRequested},
		"missing files": {CertFile: "/nonexistent.pem", KeyFile: "/nonexistent-key.pem"},
	} {
		if _, err := s.Config(); !errors.Is(err, tlsx.ErrConfig) {
			t.Errorf("%s: err %v, want ErrConfig", name, err)
		}
	}
	if _, err := (tlsx.Client{CertFile: scert}).Config(); !errors.Is(err, tlsx.ErrConfig) {
		t.Errorf("client cert without key: err %v, want ErrConfig", err)
	}
}
