package server

import "errors"

// Errors returned by Config.Validate and the readiness checks.
var (
	// ErrInvalidConfig is returned by Config.Validate for a missing or malformed setting.
	ErrInvalidConfig = errors.New("invalid coordinator config")
	// ErrNATSNotConnected is the NATS readiness failure while the connection is down.
	ErrNATSNotConnected = errors.New("not connected")
	// ErrStorageNotServing is the storage-core readiness failure when its gRPC health
	// check answers anything but SERVING.
	ErrStorageNotServing = errors.New("health check not SERVING")
)
