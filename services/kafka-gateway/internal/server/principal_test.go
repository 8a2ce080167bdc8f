package server

import (
	"crypto/tls"
	"io"
	"net"
	"testing"

	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/tlsx"
)

func TestPrincipalMappingRules(t *testing.T) {
	rules, err := parsePrincipalRules(`RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L, RULE:^cn=(.*?),ou=(.*?)$/$1\/$2/U, DEFAULT`)
	if err != nil {
		t.Fatal(err)
	}
	for dn, want := range map[string]string{
		"CN=kafka-app,OU=ServiceUsers,O=acme": "kafka-app",
		"CN=Alice,OU=Sales,O=acme":            "alice@sales",
		"cn=bob,ou=ops":                       "BOB/OPS",
		"CN=other":                            "CN=other",
	} {
		if got, ok := rules.apply(dn); !ok || got != want {
			t.Errorf("%s: %q %v, want %q", dn, got, ok, want)
		}
	}
	strict, err := parsePrincipalRules(`RULE:^CN=([a-z]+),O=tributary$/$1/`)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := strict.apply("CN=x,O=other"); ok {
		t.Error("a DN no rule matches was mapped")
	}
	for _, bad := range []string{"RULE:^x$", "RULE:(/x/", "SOMETHING", "DEFAULT DEFAULT"} {
		if _, err := parsePrincipalRules(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestSSLClientCertificatePrincipal: on an SSL listener requiring client certificates
// the principal is the certificate's DN through the mapping rules; a certificate no
// rule matches is refused; a client without a certificate fails the handshake.
func TestSSLClientCertificatePrincipal(t *testing.T) {
	s := startSecure(t, func(c *Config) {
		c.TLS.ClientAuth = tlsx.ClientAuthRequired
		c.SSLPrincipalMappingRules = `RULE:^CN=([a-z]+),O=tributary$/$1/U`
	})
	var l *kafkaListener
	for _, x := range s.srv.lns {
		if x.spec.name == "SSL" {
			l = x
		}
	}
	good, goodKey := s.ca.Issue(t, "app", "app")
	bad, badKey := s.ca.Issue(t, "weird", "Not-Lower")
	for _, tc := range []struct {
		cert, key string
		want      string // "" = refused
	}{{good, goodKey, "User:APP"}, {bad, badKey, ""}, {"", "", ""}} {
		srvSide, cliSide := net.Pipe()
		cfg, err := tlsx.Client{CAFile: s.ca.CertFile, CertFile: tc.cert, KeyFile: tc.key, ServerName: "localhost"}.Config()
		if err != nil {
			t.Fatal(err)
		}
		cl := tls.Client(cliSide, cfg)
		go func() {
			// Keep reading so the server's alerts never block on the synchronous pipe.
			_ = cl.Handshake()
			_, _ = io.Copy(io.Discard, cl)
		}()
		_, sess, err := s.srv.secure(srvSide, l, zap.NewNop())
		_ = srvSide.Close()
		_ = cl.Close()
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("certificate %q accepted as %s", tc.cert, sess.Principal())
		case tc.want != "" && (err != nil || sess.Principal() != tc.want):
			t.Errorf("certificate %q: %v, principal %v, want %s", tc.cert, err, sess, tc.want)
		}
	}
}
