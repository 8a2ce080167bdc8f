// Package config is the mqtt-bridge's YAML configuration: its shape, its defaults, the
// strict loader (an unknown key is an error naming the nearest real key and its line),
// environment overrides (TRIBUTARY_MQTT_<PATH>), secrets read from *-file keys, and
// the checks `mqtt-bridge check` reports.
package config

import (
	"time"
)

// Defaults.
const (
	DefaultHTTPAddr        = "127.0.0.1:9464"
	DefaultStorageAddr     = "127.0.0.1:7400"
	DefaultCoordinatorAddr = "127.0.0.1:7410"
	DefaultNATSURL         = "nats://127.0.0.1:4222"
	DefaultClusterID       = "tributary"
	DefaultListenerAddr    = "0.0.0.0:1883"
	DefaultStoreTimeout    = 10 * time.Second
	DefaultMaxRecordBytes  = 1 << 20
	DefaultSessionExpiry   = time.Hour
	DefaultQueueSize       = 10000
	// Listener limits (see ListenerConfig).
	DefaultMaxConnections   = 100000
	DefaultMaxSessionExpiry = 7 * 24 * time.Hour
	DefaultMaxKeepAlive     = 65535 * time.Second
	DefaultConnectTimeout   = 10 * time.Second
	DefaultStallTimeout     = 5 * time.Second
	// DefaultQueueBytesSession and DefaultQueueBytesTotal bound the QoS 1/2 message
	// bytes queued for listener subscribers, per session and over all of them.
	DefaultQueueBytesSession = 16 << 20
	DefaultQueueBytesTotal   = 1 << 30
	DefaultKeepAlive         = 30
	// Listener is the source name of the embedded broker in mqtt-to-kafka mappings.
	Listener = "listener"
)

// Config is the whole file.
type Config struct {
	// ID names this bridge (default consumer groups are tributary-<mapping id>-group;
	// upstream client ids default to tributary-<id>-<cluster>).
	ID       string `yaml:"id"`
	HTTPAddr string `yaml:"http-addr"`
	// StorageAddr is storage-core's gRPC address; several, comma-separated, are the
	// nodes of a storage-core cluster in raft mode, each call sent to its channel's
	// leader (grpcx.LeaderConn).
	StorageAddr     string `yaml:"storage-addr"`
	CoordinatorAddr string `yaml:"coordinator-addr"`
	// StorageTLS and CoordinatorTLS, when ca-file or cert-file is set, dial those
	// backends over TLS: ca-file verifies the backend, cert-file and key-file are the
	// bridge's client certificate (mTLS), server-name overrides the name checked.
	StorageTLS     TLSConfig `yaml:"storage-tls"`
	CoordinatorTLS TLSConfig `yaml:"coordinator-tls"`
	// NATSURL and ClusterID: where the coordinator announces changes
	// (tributary.<cluster-id>.…, as the coordinator's --nats-url and --cluster-id);
	// used only with listener.coordinator-logins.
	NATSURL   string `yaml:"nats-url"`
	ClusterID string `yaml:"cluster-id"`
	// TokenFile holds a bearer token sent to both backends (TLS only).
	TokenFile    string        `yaml:"token-file"`
	LogLevel     string        `yaml:"log-level"`
	StoreTimeout time.Duration `yaml:"store-timeout"`
	// Clusters are the upstream brokers the bridge connects to as a client.
	Clusters []Cluster `yaml:"clusters"`
	// Listener, when present, runs the embedded broker devices connect to.
	Listener    *ListenerConfig `yaml:"listener"`
	MQTTToKafka []MQTTToKafka   `yaml:"mqtt-to-kafka"`
	KafkaToMQTT []KafkaToMQTT   `yaml:"kafka-to-mqtt"`
}

// Cluster is an upstream MQTT broker (or a set of equivalent URLs).
type Cluster struct {
	Name string `yaml:"name"`
	// URLs: mqtt://host:port, tcp://…, tls://…, mqtts://…, ws://…, wss://….
	URLs         []string `yaml:"urls"`
	ClientID     string   `yaml:"client-id"`
	Username     string   `yaml:"username"`
	Password     string   `yaml:"password"`
	PasswordFile string   `yaml:"password-file"`
	// SessionExpiry is the MQTT 5 session expiry interval asked for (clean start is
	// off, so a restarted bridge gets the messages queued meanwhile).
	SessionExpiry time.Duration `yaml:"session-expiry"`
	// SessionDir keeps the client's in-flight packet state across restarts.
	SessionDir string     `yaml:"session-dir"`
	KeepAlive  uint16     `yaml:"keep-alive"`
	TLS        *TLSConfig `yaml:"tls"`
}

// TLSConfig is TLS for an upstream connection or the listener.
type TLSConfig struct {
	CertFile string `yaml:"cert-file"`
	KeyFile  string `yaml:"key-file"`
	// CAFile verifies the server (upstream) or client certificates (listener).
	CAFile string `yaml:"ca-file"`
	// RequireClientCert (listener) refuses clients without a certificate signed by CAFile.
	RequireClientCert  bool   `yaml:"require-client-cert"`
	InsecureSkipVerify bool   `yaml:"insecure-skip-verify"`
	ServerName         string `yaml:"server-name"`
}

// ListenerConfig is the embedded MQTT broker.
type ListenerConfig struct {
	Addr string     `yaml:"addr"`
	TLS  *TLSConfig `yaml:"tls"`
	// QueueSize bounds the messages waiting for storage at once; beyond it a QoS 1/2
	// publish is refused at once with 0x97 (quota exceeded).
	QueueSize int `yaml:"queue-size"`
	// SessionDir keeps the persistent sessions of listener clients (Clean Start 0 with
	// a Session Expiry Interval; MQTT 3.1.1 Clean Session 0) across restarts, kill -9
	// included; without it they live in memory. One bridge process per directory.
	SessionDir string `yaml:"session-dir"`
	// MaxConnections is how many clients may be connected at once; a CONNECT past it
	// is refused with CONNACK 0x89 (server busy; MQTT 3.1.1: 0x03 server unavailable).
	MaxConnections int64 `yaml:"max-connections"`
	// MaxSessionExpiry is the longest Session Expiry Interval a client gets (seconds
	// on the wire): one asking for longer gets this, told in its CONNACK.
	MaxSessionExpiry time.Duration `yaml:"max-session-expiry"`
	// MaxKeepAlive is the longest keep alive a client gets (seconds on the wire): an
	// MQTT 5 client asking for longer, or for none, gets this as Server Keep Alive in
	// its CONNACK; an MQTT 3.1.1 one, which cannot be told, is refused with CONNACK
	// 0x02 (identifier rejected), as Mosquitto's max_keepalive does.
	MaxKeepAlive time.Duration `yaml:"max-keepalive"`
	// ConnectTimeout is how long a new connection has to finish TLS and send CONNECT.
	ConnectTimeout time.Duration `yaml:"connect-timeout"`
	// StallTimeout is how long a subscriber with a full queue may acknowledge nothing
	// before it is stalled: publishers stop waiting for it and what it cannot hold is
	// dropped for it (see the README's Metrics).
	StallTimeout time.Duration `yaml:"subscriber-stall-timeout"`
	// QueueBytes bounds the bytes of QoS 1/2 messages sent to subscribers and not yet
	// acknowledged, as Mosquitto's max_queued_bytes.
	QueueBytes QueueBytesConfig `yaml:"queue-bytes"`
	// Retained is where the listener keeps its retained messages.
	Retained RetainedConfig `yaml:"retained"`
	// Events publishes client events on $events/client/<client id>/<event>.
	Events EventsConfig `yaml:"events"`
	// Users and PasswordFile turn logins on: a client must give a known user name and
	// its password (CONNACK 0x86 otherwise; MQTT 3.1.1 0x04), and is held to its
	// topic rules (0x87).
	Users []User `yaml:"users"`
	// PasswordFile holds `name:hash` lines, each hash bcrypt (as htpasswd -B writes)
	// or argon2id in the PHC string format (as the argon2 CLI writes with -e; see
	// libs/passhash for the cost bounds); its users have the rules of the Users entry
	// of the same name, or may use every topic.
	PasswordFile string `yaml:"password-file"`
	// CoordinatorLogins logs in, besides Users and PasswordFile, the users the
	// coordinator keeps (MqttUserService, Postgres), looked up at CONNECT and cached
	// (10 s, dropped at once on the coordinator's NATS change notice).
	CoordinatorLogins bool `yaml:"coordinator-logins"`
	// CertificateLogin logs a client with a verified certificate (tls.ca-file) in as
	// the user its certificate's CN names, without a password (a CONNECT user name,
	// when given, must be that CN).
	CertificateLogin bool `yaml:"certificate-login"`
}

// QueueBytesConfig is `listener.queue-bytes`: payload and topic bytes of the QoS 1/2
// messages held for subscribers (sent, not acknowledged). While a subscriber holds
// Session bytes, or all of them together Total, publishers of messages it gets wait
// (back-pressure, as for the message count); a subscriber stalled past its bound
// (subscriber-stall-timeout) has new QoS 1/2 messages dropped, counted and logged.
type QueueBytesConfig struct {
	Session int64 `yaml:"session"`
	Total   int64 `yaml:"total"`
}

// Retained message stores of the listener.
const (
	RetainedMemory = "memory" // in the process only
	RetainedFile   = "file"   // in session-dir's journal
	RetainedKafka  = "kafka"  // in a compacted topic of storage-core
	// DefaultRetainedTopic is the topic of store: kafka.
	DefaultRetainedTopic = "mqtt-retained"
)

// RetainedConfig is `listener.retained`.
type RetainedConfig struct {
	// Store is memory, file (the default with session-dir, which it needs) or kafka:
	// every retained PUBLISH and clear is a record of Topic keyed by MQTT topic, read
	// back at start and followed while running (shared by the replicas reading it).
	Store string `yaml:"store"`
	// Topic is the store: kafka topic (default mqtt-retained), created with
	// cleanup.policy=compact when missing.
	Topic string `yaml:"topic"`
}

// User is a listener login.
type User struct {
	Username string `yaml:"username"`
	// PasswordHash is a bcrypt hash ($2a$, $2b$, $2y$) or an argon2id PHC string
	// ($argon2id$v=19$m=...,t=...,p=...$salt$hash), within libs/passhash's cost
	// bounds; never the password.
	PasswordHash string `yaml:"password-hash"`
	// Publish and Subscribe are the filters the user may publish to and subscribe
	// within (%u is the user name, %c the client id, each a whole level); unset: all.
	Publish   []string `yaml:"publish"`
	Subscribe []string `yaml:"subscribe"`
}

// EventsConfig is `listener.events`.
type EventsConfig struct {
	// Enabled publishes connected, disconnected, subscribed and unsubscribed (QoS 0,
	// not retained, JSON) for every listener client; an mqtt-to-kafka mapping with
	// source listener and a filter such as "$events/#" stores them.
	Enabled bool `yaml:"enabled"`
}

// RetainedStore is Retained.Store, or its default when unset: file with a
// session-dir, memory without.
func (c ListenerConfig) RetainedStore() string {
	switch {
	case c.Retained.Store != "":
		return c.Retained.Store
	case c.SessionDir != "":
		return RetainedFile
	}
	return RetainedMemory
}

// MQTTToKafka moves messages matching filters into a Kafka topic.
type MQTTToKafka struct {
	ID string `yaml:"id"`
	// Source is an upstream cluster name or "listener"; default the only source.
	Source  string   `yaml:"source"`
	Filters []string `yaml:"mqtt-topic-filters"`
	// QoS is the subscription QoS upstream (default 1).
	QoS               *int       `yaml:"qos"`
	KafkaTopic        string     `yaml:"kafka-topic"`
	Key               string     `yaml:"key"`
	PartitionStrategy string     `yaml:"partition-strategy"`
	Headers           HeaderSpec `yaml:"headers"`
	MaxRecordBytes    int        `yaml:"max-record-bytes"`
	// Acknowledge: "stored" (after storage-core has it on disk) or "routed".
	Acknowledge string `yaml:"acknowledge"`
	// Partitions is the partition count when the bridge creates the topic (default 1).
	Partitions int32 `yaml:"partitions"`
}

// KafkaToMQTT publishes Kafka records to MQTT.
type KafkaToMQTT struct {
	ID string `yaml:"id"`
	// Target is an upstream cluster name or "listener"; default the only one.
	Target            string     `yaml:"target"`
	KafkaTopics       []string   `yaml:"kafka-topics"`
	KafkaTopicPattern string     `yaml:"kafka-topic-pattern"`
	MQTTTopic         StringList `yaml:"mqtt-topic"`
	QoS               *int       `yaml:"qos"`
	Retain            bool       `yaml:"retain"`
	Properties        Properties `yaml:"properties"`
	FromHeaders       bool       `yaml:"from-headers"`
	ConsumerGroup     string     `yaml:"consumer-group"`
	// StartAt is where a group without committed offsets starts: latest (default) or
	// earliest.
	StartAt string `yaml:"start-at"`
}

// Properties are MQTT 5 properties set on every published message.
type Properties struct {
	ContentType            string         `yaml:"content-type"`
	ResponseTopic          string         `yaml:"response-topic"`
	CorrelationData        string         `yaml:"correlation-data"`
	MessageExpiryInterval  *uint32        `yaml:"message-expiry-interval"`
	PayloadFormatIndicator *byte          `yaml:"payload-format-indicator"`
	UserProperties         []UserProperty `yaml:"user-properties"`
}

// UserProperty is one MQTT 5 user property.
type UserProperty struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// QoSOr returns *q, or def when unset.
func QoSOr(q *int, def int) int {
	if q == nil {
		return def
	}
	return *q
}
