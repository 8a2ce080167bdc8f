package server

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/tlsx"
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("invalid config")

// Config configures the pubsub-gateway server. The flags of cmd/pubsub-gateway map to
// it one to one.
type Config struct {
	// GRPCAddr serves google.pubsub.v1 (emulator mode: plaintext, no auth).
	GRPCAddr string
	// TLS, when its certificate is set, serves GRPCAddr over TLS (with client
	// certificates verified when ClientCAFile and ClientAuth say so). Callers' own
	// credentials (OAuth tokens of Google's clients) are accepted and not checked.
	TLS tlsx.Server
	// HTTPAddr serves /metrics, /healthz, /readyz ("" = disabled).
	HTTPAddr string
	// StorageAddr and CoordinatorAddr are the gRPC addresses of storage-core and the
	// coordinator. StorageAddr may list several, comma-separated: the nodes of a
	// storage-core cluster in raft mode, each call sent to its channel's leader
	// (grpcx.LeaderConn); one address is one connection, as before.
	StorageAddr     string
	CoordinatorAddr string
	// StorageSecurity and CoordinatorSecurity are how they are dialed (TLS, client
	// certificate, token); zero: plaintext.
	StorageSecurity, CoordinatorSecurity grpcx.DialSecurity
	// NATSURL is the NATS server carrying lease wake-ups between the replicas and from
	// the coordinator's ack-deadline sweep ("" = none: streams poll their leases every
	// second instead).
	NATSURL string
	// ClusterID prefixes the NATS subjects ("tributary.<cluster-id>."), as for the
	// other services.
	ClusterID string
	// StreamBufferBytes bounds the message bytes this replica's StreamingPull streams
	// hold for clients that read slowly or not at all (0 = 256 MiB); each open stream
	// gets an equal share and stops pulling past it.
	StreamBufferBytes int64
}

// clusterIDPattern keeps the cluster id a single NATS subject token.
var clusterIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Validate checks the config.
func (c *Config) Validate() error {
	switch {
	case c.GRPCAddr == "":
		return fmt.Errorf("%w: grpc address is empty", ErrConfig)
	case c.StorageAddr == "":
		return fmt.Errorf("%w: storage address is empty", ErrConfig)
	case c.CoordinatorAddr == "":
		return fmt.Errorf("%w: coordinator address is empty", ErrConfig)
	case c.NATSURL != "" && !clusterIDPattern.MatchString(c.ClusterID):
		return fmt.Errorf("%w: cluster id %q must be 1..64 of [A-Za-z0-9_-]", ErrConfig, c.ClusterID)
	case c.StreamBufferBytes < 0:
		return fmt.Errorf("%w: stream buffer bytes %d is negative", ErrConfig, c.StreamBufferBytes)
	}
	return nil
}
