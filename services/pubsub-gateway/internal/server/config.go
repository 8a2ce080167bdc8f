package server

import (
	"errors"
	"fmt"
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("invalid config")

// Config configures the pubsub-gateway server. The flags of cmd/pubsub-gateway map to
// it one to one.
type Config struct {
	// GRPCAddr serves google.pubsub.v1 (emulator mode: plaintext, no auth).
	GRPCAddr string
	// HTTPAddr serves /metrics, /healthz, /readyz ("" = disabled).
	HTTPAddr string
	// StorageAddr and CoordinatorAddr are the gRPC addresses of storage-core and the
	// coordinator.
	StorageAddr     string
	CoordinatorAddr string
}

// Validate checks the config.
func (c *Config) Validate() error {
	switch {
	case c.GRPCAddr == "":
		return fmt.Errorf("%w: grpc address is empty", ErrConfig)
	case c.StorageAddr == "":
		return fmt.Errorf("%w: storage address is empty", ErrConfig)
	case c.CoordinatorAddr == "":
		return fmt.Errorf("%w: coordinator address is empty", ErrConfig)
	}
	return nil
}
