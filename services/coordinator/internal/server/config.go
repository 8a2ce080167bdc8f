package server

import (
	"fmt"
	"regexp"
	"time"

	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/services/coordinator/internal/consumergroup"
)

// Config is the coordinator's configuration (flags --grpc-addr, --http-addr,
// --postgres-url, --storage-addr, --nats-url, --cluster-id,
// --transaction-max-timeout, --transactional-id-expiration, and the TLS and auth flags
// of grpcx.RegisterServerFlags and grpcx.RegisterClientFlags).
type Config struct {
	// GRPCAddr is the CoordinatorService listen address (host:port; port 0 picks one).
	GRPCAddr string
	// HTTPAddr serves /metrics, /healthz and /readyz (port 0 picks one).
	HTTPAddr string
	// PostgresURL names the coordinator database; it is created when missing.
	PostgresURL string
	// StorageAddr is storage-core's gRPC address.
	StorageAddr string
	// NATSURL is the NATS server URL (comma separated for several).
	NATSURL string
	// ClusterID prefixes NATS subjects: "tributary.<cluster-id>.".
	ClusterID string
	// TransactionMaxTimeout is Kafka's transaction.max.timeout.ms: the largest
	// transaction.timeout.ms a transactional producer may ask for (0 = 15 min).
	TransactionMaxTimeout time.Duration
	// TransactionalIDExpiration is Kafka's transactional.id.expiration.ms: an id without
	// an open transaction unused this long is deleted (0 = 7 days).
	TransactionalIDExpiration time.Duration
	// ConsumerGroups holds the KIP-848 consumer group settings
	// (group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms,
	// group.consumer.assignors, group.consumer.max.size).
	ConsumerGroups consumergroup.Config
	// ShareGroups holds the KIP-932 share group settings
	// (group.share.session.timeout.ms, group.share.heartbeat.interval.ms,
	// group.share.max.size).
	ShareGroups consumergroup.ShareConfig
	// PubSubExpiryInterval is how often the sweep-lock holder deletes expired Pub/Sub
	// subscriptions (1 min when 0; not a flag).
	PubSubExpiryInterval time.Duration
	// Security is the gRPC server's TLS and caller authentication (authRules); zero:
	// plaintext, every caller served.
	Security grpcx.ServerSecurity
	// StorageSecurity is how storage-core is dialed (TLS, client certificate, token).
	StorageSecurity grpcx.DialSecurity
	// Now is the clock of the group coordinator and the Pub/Sub registry (time.Now
	// when nil; tests move it).
	Now func() time.Time
}

// DefaultConfig returns the defaults of the coordinator's flags.
func DefaultConfig() Config {
	return Config{
		GRPCAddr:    "127.0.0.1:7410",
		HTTPAddr:    "127.0.0.1:7411",
		PostgresURL: "postgres://postgres@127.0.0.1:5432/tributary?sslmode=disable",
		StorageAddr: "127.0.0.1:7400",
		NATSURL:     "nats://127.0.0.1:4222",
		ClusterID:   "tributary",

		TransactionMaxTimeout:     15 * time.Minute,
		TransactionalIDExpiration: 7 * 24 * time.Hour,
		ConsumerGroups: consumergroup.Config{SessionTimeout: 45 * time.Second, HeartbeatInterval: 5 * time.Second,
			Assignors: []string{consumergroup.AssignorUniform, consumergroup.AssignorRange}},
		ShareGroups: consumergroup.ShareConfig{SessionTimeout: 45 * time.Second, HeartbeatInterval: 5 * time.Second, MaxSize: 200},
	}
}

// clusterIDPattern keeps the cluster id a single NATS subject token.
var clusterIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Validate checks that every setting is present and well formed. Errors wrap
// ErrInvalidConfig.
func (c Config) Validate() error {
	for _, f := range []struct{ name, v string }{
		{"grpc-addr", c.GRPCAddr}, {"http-addr", c.HTTPAddr}, {"postgres-url", c.PostgresURL},
		{"storage-addr", c.StorageAddr}, {"nats-url", c.NATSURL},
	} {
		if f.v == "" {
			return fmt.Errorf("%w: --%s is empty", ErrInvalidConfig, f.name)
		}
	}
	if c.TransactionMaxTimeout < 0 || c.TransactionMaxTimeout > time.Duration(1<<31-1)*time.Millisecond {
		return fmt.Errorf("%w: --transaction-max-timeout %s must be 0 (15m) or up to %dms", ErrInvalidConfig, c.TransactionMaxTimeout, 1<<31-1)
	}
	if c.TransactionalIDExpiration < 0 {
		return fmt.Errorf("%w: --transactional-id-expiration %s is negative", ErrInvalidConfig, c.TransactionalIDExpiration)
	}
	if !clusterIDPattern.MatchString(c.ClusterID) {
		return fmt.Errorf("%w: --cluster-id %q must be 1..64 of [A-Za-z0-9_-]", ErrInvalidConfig, c.ClusterID)
	}
	if err := c.Security.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := c.ConsumerGroups.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := c.ShareGroups.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return nil
}
