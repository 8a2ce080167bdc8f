package server

// Kafka listeners, configured as a Kafka broker configures them: `listeners`
// ("NAME://host:port,..."), `advertised.listeners` (same shape, the address clients are
// told) and `listener.security.protocol.map` ("NAME:PROTOCOL,..."). A listener whose
// name is a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) needs no map
// entry. Every listener is bound by New; each connection knows the listener it came in
// on, and Metadata, FindCoordinator and DescribeCluster answer with every broker's
// endpoint of that same listener (peers learn each other's listeners through the NATS
// announcements of package cluster).

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// SecurityProtocol is a Kafka listener security protocol.
type SecurityProtocol string

// The security protocols Kafka defines (org.apache.kafka.common.security.auth.SecurityProtocol).
const (
	Plaintext     SecurityProtocol = "PLAINTEXT"
	SSL           SecurityProtocol = "SSL"
	SASLPlaintext SecurityProtocol = "SASL_PLAINTEXT"
	SASLSSL       SecurityProtocol = "SASL_SSL"
)

// TLS reports whether the protocol runs over TLS.
func (p SecurityProtocol) TLS() bool { return p == SSL || p == SASLSSL }

// SASL reports whether the protocol authenticates with SASL.
func (p SecurityProtocol) SASL() bool { return p == SASLPlaintext || p == SASLSSL }

func parseProtocol(s string) (SecurityProtocol, bool) {
	switch p := SecurityProtocol(strings.ToUpper(s)); p {
	case Plaintext, SSL, SASLPlaintext, SASLSSL:
		return p, true
	}
	return "", false
}

// listenerSpec is one configured listener.
type listenerSpec struct {
	name     string
	protocol SecurityProtocol
	addr     string // bind host:port
	adv      string // advertised host:port ("" = the bound address)
}

// DefaultTLSListenerPort is the port of the SASL_SSL listener added beside PLAINTEXT when
// TLS material is given without --listeners (Kafka's customary 9093).
const DefaultTLSListenerPort = "9093"

// parseListenerList parses "NAME://host:port,..." into name -> host:port, keeping order.
func parseListenerList(what, s string) ([]string, map[string]string, error) {
	var names []string
	addrs := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, addr, ok := strings.Cut(item, "://")
		if !ok || name == "" {
			return nil, nil, fmt.Errorf("%w: %s entry %q is not NAME://host:port", ErrConfig, what, item)
		}
		name = strings.ToUpper(name)
		for _, r := range name {
			if !(r == '_' || r == '-' || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')) {
				return nil, nil, fmt.Errorf("%w: %s name %q: only letters, digits, '_' and '-'", ErrConfig, what, name)
			}
		}
		if _, dup := addrs[name]; dup {
			return nil, nil, fmt.Errorf("%w: %s names %s twice", ErrConfig, what, name)
		}
		if _, port, err := net.SplitHostPort(addr); err != nil {
			return nil, nil, fmt.Errorf("%w: %s %s address %q: %v", ErrConfig, what, name, addr, err)
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return nil, nil, fmt.Errorf("%w: %s %s port %q", ErrConfig, what, name, port)
		}
		names = append(names, name)
		addrs[name] = addr
	}
	return names, addrs, nil
}

// listenerSpecs resolves the listener settings of c: --listeners (or the single
// PLAINTEXT --listen, plus SASL_SSL on port 9093 of the same host when a TLS
// certificate is given), --advertised-listeners (or --advertised-addr for the first
// listener) and --listener-security-protocol-map.
func (c *Config) listenerSpecs() ([]listenerSpec, error) {
	spec := c.Listeners
	if spec == "" {
		spec = "PLAINTEXT://" + c.Listen
		if c.TLS.Enabled() {
			host, _, err := net.SplitHostPort(c.Listen)
			if err != nil {
				return nil, fmt.Errorf("%w: listen address %q: %v", ErrConfig, c.Listen, err)
			}
			port := DefaultTLSListenerPort
			if strings.HasSuffix(c.Listen, ":0") {
				port = "0"
			}
			spec += ",SASL_SSL://" + net.JoinHostPort(host, port)
		}
	}
	names, addrs, err := parseListenerList("listeners", spec)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no listener", ErrConfig)
	}
	protoMap := map[string]SecurityProtocol{}
	for _, item := range strings.Split(c.ListenerSecurityProtocolMap, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, proto, ok := strings.Cut(item, ":")
		p, known := parseProtocol(proto)
		if !ok || !known {
			return nil, fmt.Errorf("%w: listener security protocol map entry %q is not NAME:PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL", ErrConfig, item)
		}
		protoMap[strings.ToUpper(name)] = p
	}
	advNames, advAddrs, err := parseListenerList("advertised listeners", c.AdvertisedListeners)
	if err != nil {
		return nil, err
	}
	for _, n := range advNames {
		if _, ok := addrs[n]; !ok {
			return nil, fmt.Errorf("%w: advertised listener %s is not in listeners", ErrConfig, n)
		}
	}
	out := make([]listenerSpec, 0, len(names))
	for i, n := range names {
		p, ok := protoMap[n]
		if !ok {
			if p, ok = parseProtocol(n); !ok {
				return nil, fmt.Errorf("%w: listener %s has no security protocol (add it to the listener security protocol map)", ErrConfig, n)
			}
		}
		l := listenerSpec{name: n, protocol: p, addr: addrs[n], adv: advAddrs[n]}
		if l.adv == "" && i == 0 && c.AdvertisedListeners == "" {
			l.adv = c.AdvertisedAddr
		}
		if p.TLS() && !c.TLS.Enabled() {
			return nil, fmt.Errorf("%w: listener %s is %s but no TLS certificate is given (--tls-cert, --tls-key)", ErrConfig, n, p)
		}
		out = append(out, l)
	}
	return out, nil
}
