package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/passhash"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/template"
)

// Key modes of an mqtt-to-kafka mapping besides a template.
const (
	KeyTopic    = "topic"
	KeyClientID = "clientid"
	KeyNone     = "none"
)

// Partition strategies.
const (
	KeyBased = "key-based"
	Uniform  = "uniform"
)

// Acknowledge modes.
const (
	AckStored = "stored"
	AckRouted = "routed"
)

func (l *loader) defaults(c *Config) {
	if c.ID == "" {
		c.ID = "bridge"
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.StorageAddr == "" {
		c.StorageAddr = DefaultStorageAddr
	}
	if c.CoordinatorAddr == "" {
		c.CoordinatorAddr = DefaultCoordinatorAddr
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.NATSURL == "" {
		c.NATSURL = DefaultNATSURL
	}
	if c.ClusterID == "" {
		c.ClusterID = DefaultClusterID
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	for i := range c.Clusters {
		cl := &c.Clusters[i]
		if cl.ClientID == "" {
			cl.ClientID = "tributary-" + c.ID + "-" + cl.Name
		}
		if cl.SessionExpiry == 0 {
			cl.SessionExpiry = DefaultSessionExpiry
		}
		if cl.KeepAlive == 0 {
			cl.KeepAlive = DefaultKeepAlive
		}
	}
	if c.Listener != nil {
		if c.Listener.Addr == "" {
			c.Listener.Addr = DefaultListenerAddr
		}
		if c.Listener.QueueSize == 0 {
			c.Listener.QueueSize = DefaultQueueSize
		}
		for _, d := range []struct {
			v   *time.Duration
			def time.Duration
		}{
			{&c.Listener.MaxSessionExpiry, DefaultMaxSessionExpiry},
			{&c.Listener.MaxKeepAlive, DefaultMaxKeepAlive},
			{&c.Listener.ConnectTimeout, DefaultConnectTimeout},
			{&c.Listener.StallTimeout, DefaultStallTimeout},
		} {
			if *d.v == 0 {
				*d.v = d.def
			}
		}
		if c.Listener.MaxConnections == 0 {
			c.Listener.MaxConnections = DefaultMaxConnections
		}
		if c.Listener.QueueBytes.Session == 0 {
			c.Listener.QueueBytes.Session = DefaultQueueBytesSession
		}
		if c.Listener.QueueBytes.Total == 0 {
			c.Listener.QueueBytes.Total = DefaultQueueBytesTotal
		}
		c.Listener.Retained.Store = c.Listener.RetainedStore()
		if r := &c.Listener.Retained; r.Store == RetainedKafka && r.Topic == "" {
			r.Topic = DefaultRetainedTopic
		}
	}
	only := ""
	if srcs := c.sources(); len(srcs) == 1 {
		only = srcs[0]
	}
	for i := range c.MQTTToKafka {
		m := &c.MQTTToKafka[i]
		if m.Source == "" {
			m.Source = only
		}
		if m.Key == "" {
			m.Key = KeyTopic
		}
		if m.PartitionStrategy == "" {
			m.PartitionStrategy = KeyBased
		}
		if m.MaxRecordBytes == 0 {
			m.MaxRecordBytes = DefaultMaxRecordBytes
		}
		if m.Acknowledge == "" {
			m.Acknowledge = AckStored
		}
		if m.Partitions == 0 {
			m.Partitions = 1
		}
	}
	for i := range c.KafkaToMQTT {
		m := &c.KafkaToMQTT[i]
		if m.Target == "" {
			m.Target = only
		}
		if len(m.MQTTTopic) == 0 {
			m.MQTTTopic = StringList{"${KAFKA_TOPIC}"}
		}
		if m.ConsumerGroup == "" {
			m.ConsumerGroup = "tributary-" + m.ID + "-group"
		}
		if m.StartAt == "" {
			m.StartAt = "latest"
		}
	}
}

// sources lists the names mappings may use: the clusters, then "listener".
func (c *Config) sources() []string {
	var out []string
	for _, cl := range c.Clusters {
		out = append(out, cl.Name)
	}
	if c.Listener != nil {
		out = append(out, Listener)
	}
	return out
}

func (l *loader) secrets(c *Config) {
	for i := range c.Clusters {
		cl := &c.Clusters[i]
		if cl.PasswordFile == "" {
			continue
		}
		p := fmt.Sprintf("clusters[%d].password-file", i)
		if cl.Password != "" {
			l.add(p, "password and password-file are both set; keep one")
			continue
		}
		b, err := os.ReadFile(cl.PasswordFile)
		if err != nil {
			l.add(p, "%v", err)
			continue
		}
		cl.Password = strings.TrimSpace(string(b))
	}
}

func (l *loader) validate(c *Config) {
	names := map[string]bool{}
	for i, cl := range c.Clusters {
		p := fmt.Sprintf("clusters[%d]", i)
		switch {
		case cl.Name == "":
			l.add(p, "name is required")
		case cl.Name == Listener:
			l.add(p+".name", "%q is the embedded broker's name; pick another", Listener)
		case names[cl.Name]:
			l.add(p+".name", "cluster %q is defined twice", cl.Name)
		}
		names[cl.Name] = true
		if len(cl.URLs) == 0 {
			l.add(p, "urls is required (e.g. mqtt://127.0.0.1:1883)")
		}
		for j, u := range cl.URLs {
			pu, err := url.Parse(u)
			if err != nil || pu.Host == "" {
				l.add(fmt.Sprintf("%s.urls[%d]", p, j), "%q is not a broker URL like mqtt://host:1883", u)
				continue
			}
			switch pu.Scheme {
			case "mqtt", "tcp", "tls", "ssl", "mqtts", "ws", "wss":
			default:
				l.add(fmt.Sprintf("%s.urls[%d]", p, j), "scheme %q: use mqtt, tcp, tls, mqtts, ws or wss", pu.Scheme)
			}
		}
		if cl.SessionExpiry < 0 {
			l.add(p+".session-expiry", "must not be negative")
		}
		l.checkTLS(cl.TLS, p+".tls", false)
	}
	if c.Listener != nil {
		if c.Listener.QueueSize < 0 {
			l.add("listener.queue-size", "must be positive")
		}
		if c.Listener.MaxConnections < 0 {
			l.add("listener.max-connections", "must be positive")
		}
		if q := c.Listener.QueueBytes; q.Session < 0 || q.Total < 0 {
			l.add("listener.queue-bytes", "session and total must be positive")
		} else if q.Session > q.Total {
			l.add("listener.queue-bytes.session", "must be at most total (%d)", q.Total)
		}
		for _, d := range []struct {
			key string
			v   time.Duration
			max time.Duration
		}{
			{"max-session-expiry", c.Listener.MaxSessionExpiry, (1<<32 - 1) * time.Second},
			{"max-keepalive", c.Listener.MaxKeepAlive, 65535 * time.Second},
			{"connect-timeout", c.Listener.ConnectTimeout, 0},
			{"subscriber-stall-timeout", c.Listener.StallTimeout, 0},
		} {
			switch {
			case d.v < 0:
				l.add("listener."+d.key, "must be positive")
			case d.max > 0 && (d.v > d.max || d.v%time.Second != 0):
				l.add("listener."+d.key, "must be whole seconds, at most %v", d.max)
			}
		}
		l.checkTLS(c.Listener.TLS, "listener.tls", true)
		if d := c.Listener.SessionDir; d != "" {
			if fi, err := os.Stat(d); err == nil && !fi.IsDir() {
				l.add("listener.session-dir", "%s is not a directory", d)
			}
		}
		switch r := c.Listener.Retained; r.Store {
		case RetainedMemory, RetainedKafka:
		case RetainedFile:
			if c.Listener.SessionDir == "" {
				l.add("listener.retained.store", "file keeps retained messages in session-dir; set it")
			}
		default:
			l.add("listener.retained.store", "must be memory, file or kafka, not %q", r.Store)
		}
		if r := c.Listener.Retained; r.Topic != "" && r.Store != RetainedKafka {
			l.add("listener.retained.topic", "only store: kafka uses a topic")
		}
		for i, u := range c.Listener.Users {
			p := fmt.Sprintf("listener.users[%d]", i)
			if u.Username == "" {
				l.add(p+".username", "must be set")
			}
			if u.PasswordHash != "" {
				if _, err := passhash.Parse(u.PasswordHash); err != nil {
					l.add(p+".password-hash", "must be a bcrypt or argon2id hash, not a password: %v", err)
				}
			}
			for _, f := range append(append([]string{}, u.Publish...), u.Subscribe...) {
				if err := ValidateFilter(f); err != nil {
					l.add(p, "filter %q: %v", f, err)
				}
			}
		}
		if c.Listener.CertificateLogin && (c.Listener.TLS == nil || c.Listener.TLS.CAFile == "") {
			l.add("listener.certificate-login", "needs listener.tls.ca-file to verify client certificates")
		}
		if f := c.Listener.PasswordFile; f != "" {
			if _, err := os.Stat(f); err != nil {
				l.add("listener.password-file", "%v", err)
			}
		}
	}
	if c.StoreTimeout < 0 {
		l.add("store-timeout", "must be positive")
	}
	for _, b := range []struct {
		key string
		t   *TLSConfig
	}{{"storage-tls", &c.StorageTLS}, {"coordinator-tls", &c.CoordinatorTLS}} {
		if *b.t == (TLSConfig{}) {
			continue
		}
		if b.t.InsecureSkipVerify || b.t.RequireClientCert {
			l.add(b.key, "insecure-skip-verify and require-client-cert do not apply to a backend")
		}
		l.checkTLS(b.t, b.key, false)
	}
	if c.TokenFile != "" && c.StorageTLS == (TLSConfig{}) && c.CoordinatorTLS == (TLSConfig{}) {
		l.add("token-file", "a token is sent over TLS only: give storage-tls or coordinator-tls")
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		l.add("log-level", "%q: use debug, info, warn or error", c.LogLevel)
	}
	srcs := c.sources()
	ids := map[string]bool{}
	checkID := func(p, id string) {
		switch {
		case id == "":
			l.add(p, "id is required")
		case ids[id]:
			l.add(p+".id", "mapping id %q is used twice", id)
		}
		ids[id] = true
	}
	checkSource := func(p, key, name string) {
		switch {
		case len(srcs) == 0:
			l.add(p, "no MQTT side: define clusters or a listener")
		case name == "":
			l.add(p, "%s is required when there are several MQTT sides (%s)", key, strings.Join(srcs, ", "))
		case !contains(srcs, name):
			msg := fmt.Sprintf("unknown cluster %q", name)
			if near := Nearest(name, srcs); near != "" {
				msg += fmt.Sprintf("; did you mean %q?", near)
			}
			l.add(p+"."+key, "%s", msg)
		}
	}
	for i, m := range c.MQTTToKafka {
		p := fmt.Sprintf("mqtt-to-kafka[%d]", i)
		checkID(p, m.ID)
		checkSource(p, "source", m.Source)
		if len(m.Filters) == 0 {
			l.add(p, "mqtt-topic-filters is required")
		}
		for j, f := range m.Filters {
			if err := ValidateFilter(f); err != nil {
				l.add(fmt.Sprintf("%s.mqtt-topic-filters[%d]", p, j), "%v", err)
			}
		}
		if q := QoSOr(m.QoS, 1); q < 0 || q > 2 {
			l.add(p+".qos", "QoS %d: must be 0, 1 or 2", q)
		}
		if m.KafkaTopic == "" {
			l.add(p, "kafka-topic is required")
		} else if err := channel.ValidateKafkaTopic(m.KafkaTopic); err != nil {
			l.add(p+".kafka-topic", "%v", err)
		}
		switch m.Key {
		case KeyTopic, KeyNone:
		case KeyClientID:
			if m.Source != Listener && m.Source != "" {
				l.warn(p+".key", "the publisher's client id is known only in listener mode; upstream it is empty")
			}
		default:
			t, err := template.Compile(m.Key, template.MQTT)
			if err != nil {
				l.add(p+".key", "%v (or use topic, clientid, none)", err)
			} else if t.UsesClientID() && m.Source != Listener && m.Source != "" {
				l.warn(p+".key", "${MQTT_CLIENTID} is known only in listener mode; upstream it is empty")
			}
		}
		switch m.PartitionStrategy {
		case KeyBased, Uniform:
		default:
			l.add(p+".partition-strategy", "%q: use key-based or uniform", m.PartitionStrategy)
		}
		if m.MaxRecordBytes < 0 {
			l.add(p+".max-record-bytes", "must be positive")
		}
		switch m.Acknowledge {
		case AckStored, AckRouted:
		default:
			l.add(p+".acknowledge", "%q: use stored or routed", m.Acknowledge)
		}
		if m.Partitions < 1 || m.Partitions > channel.MaxPartitions {
			l.add(p+".partitions", "%d: must be 1..%d", m.Partitions, channel.MaxPartitions)
		}
		known := append([]string{UserProperties}, HeaderNames...)
		for _, n := range m.Headers.Names {
			if !contains(known, n) {
				l.add(p+".headers", "unknown header %q; did you mean %q?", n, Nearest(n, known))
			}
		}
		for _, f := range m.Headers.Fixed {
			if f.Name == "" {
				l.ps = append(l.ps, Problem{Line: f.Line, Path: p + ".headers", Msg: "a fixed header needs a name"})
			}
		}
	}
	patterns := make([]*regexp.Regexp, len(c.KafkaToMQTT))
	for i, m := range c.KafkaToMQTT {
		p := fmt.Sprintf("kafka-to-mqtt[%d]", i)
		checkID(p, m.ID)
		checkSource(p, "target", m.Target)
		switch {
		case len(m.KafkaTopics) == 0 && m.KafkaTopicPattern == "":
			l.add(p, "kafka-topics or kafka-topic-pattern is required")
		case len(m.KafkaTopics) > 0 && m.KafkaTopicPattern != "":
			l.add(p, "kafka-topics and kafka-topic-pattern are both set; keep one")
		}
		for j, t := range m.KafkaTopics {
			if err := channel.ValidateKafkaTopic(t); err != nil {
				l.add(fmt.Sprintf("%s.kafka-topics[%d]", p, j), "%v", err)
			}
		}
		if m.KafkaTopicPattern != "" {
			re, err := CompilePattern(m.KafkaTopicPattern)
			if err != nil {
				l.add(p+".kafka-topic-pattern", "%v", err)
			}
			patterns[i] = re
		}
		for j, src := range m.MQTTTopic {
			pp := fmt.Sprintf("%s.mqtt-topic", p)
			if len(m.MQTTTopic) > 1 {
				pp = fmt.Sprintf("%s[%d]", pp, j)
			}
			tp, err := template.Compile(src, template.Kafka)
			if err != nil {
				l.add(pp, "%v", err)
				continue
			}
			if strings.ContainsAny(src, "+#") {
				l.add(pp, "%q: an MQTT topic to publish to cannot hold + or #", src)
			}
			if strings.HasPrefix(tp.ExpandKafka("t", nil), "$") {
				l.add(pp, "%q: topics starting with $ belong to the broker", src)
			}
		}
		if q := QoSOr(m.QoS, 1); q < 0 || q > 2 {
			l.add(p+".qos", "QoS %d: must be 0, 1 or 2", q)
		}
		if pf := m.Properties.PayloadFormatIndicator; pf != nil && *pf > 1 {
			l.add(p+".properties.payload-format-indicator", "must be 0 or 1")
		}
		pr := m.Properties
		for _, f := range [][2]string{{"content-type", pr.ContentType}, {"response-topic", pr.ResponseTopic}} {
			if err := MQTTString(f[1]); err != nil {
				l.add(p+".properties."+f[0], "%v", err)
			}
		}
		if strings.ContainsAny(pr.ResponseTopic, "+#") {
			l.add(p+".properties.response-topic", "%q: a response topic cannot hold + or #", pr.ResponseTopic)
		}
		if len(pr.CorrelationData) > 65535 {
			l.add(p+".properties.correlation-data", "longer than 65535 bytes")
		}
		for j, u := range pr.UserProperties {
			for _, f := range [][2]string{{"name", u.Name}, {"value", u.Value}} {
				if err := MQTTString(f[1]); err != nil {
					l.add(fmt.Sprintf("%s.properties.user-properties[%d].%s", p, j, f[0]), "%v", err)
				}
			}
		}
		switch m.StartAt {
		case "latest", "earliest":
		default:
			l.add(p+".start-at", "%q: use latest or earliest", m.StartAt)
		}
	}
	// Loops: a topic an mqtt-to-kafka mapping writes that a kafka-to-mqtt mapping reads.
	for i, k := range c.KafkaToMQTT {
		for _, m := range c.MQTTToKafka {
			if m.KafkaTopic == "" {
				continue
			}
			reads := contains(k.KafkaTopics, m.KafkaTopic) || (patterns[i] != nil && patterns[i].MatchString(m.KafkaTopic))
			if reads {
				l.warn(fmt.Sprintf("kafka-to-mqtt[%d]", i), "loop: %q reads Kafka topic %q, which mqtt-to-kafka %q writes; the bridge never writes a record it read from %q back to it (No Local upstream, own publishes skipped on the listener), but other clients on the broker may still echo it", k.ID, m.KafkaTopic, m.ID, m.KafkaTopic)
			}
		}
	}
}

func (l *loader) checkTLS(t *TLSConfig, p string, server bool) {
	if t == nil {
		return
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		l.add(p, "cert-file and key-file go together")
	}
	if server && t.CertFile == "" {
		l.add(p, "the listener needs cert-file and key-file for TLS")
	}
	if server && t.RequireClientCert && t.CAFile == "" {
		l.add(p, "require-client-cert needs ca-file")
	}
	missing := false
	for _, f := range []struct{ k, v string }{{"cert-file", t.CertFile}, {"key-file", t.KeyFile}, {"ca-file", t.CAFile}} {
		if f.v == "" {
			continue
		}
		if _, err := os.Stat(f.v); err != nil {
			l.add(p+"."+f.k, "%v", err)
			missing = true
		}
	}
	if missing {
		return
	}
	if t.CertFile != "" && t.KeyFile != "" {
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			l.add(p+".cert-file", "%v", err)
		}
	}
	if t.CAFile != "" {
		if b, err := os.ReadFile(t.CAFile); err != nil || !x509.NewCertPool().AppendCertsFromPEM(b) {
			l.add(p+".ca-file", "%s holds no PEM certificate", t.CAFile)
		}
	}
}

// CompilePattern compiles a kafka-topic-pattern; it must match the whole topic name.
func CompilePattern(p string) (*regexp.Regexp, error) {
	return regexp.Compile("^(?:" + p + ")$")
}

// ValidateFilter checks an MQTT topic filter: non-empty, at most 65535 bytes, no NUL,
// + alone in its level, # alone in the last level.
func ValidateFilter(f string) error {
	if f == "" {
		return fmt.Errorf("empty topic filter")
	}
	if len(f) > 65535 {
		return fmt.Errorf("topic filter longer than 65535 bytes")
	}
	if strings.ContainsRune(f, 0) {
		return fmt.Errorf("topic filter %q contains NUL", f)
	}
	levels := strings.Split(f, "/")
	for i, lv := range levels {
		if strings.Contains(lv, "#") && (lv != "#" || i != len(levels)-1) {
			return fmt.Errorf("topic filter %q: # must be alone in the last level", f)
		}
		if strings.Contains(lv, "+") && lv != "+" {
			return fmt.Errorf("topic filter %q: + must be alone in its level", f)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// MQTTString checks what an MQTT UTF-8 string may hold ([MQTT-1.5.4]): well-formed
// UTF-8, no NUL, at most 65535 bytes. A broker ends the connection of a client that
// sends anything else. Used for static properties here and for properties built from
// Kafka records at run time (mapping).
func MQTTString(s string) error {
	switch {
	case len(s) > 65535:
		return fmt.Errorf("longer than 65535 bytes")
	case !utf8.ValidString(s):
		return fmt.Errorf("%q is not UTF-8", s)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%q contains NUL", s)
	}
	return nil
}
