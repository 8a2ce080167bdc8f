package group

import "errors"

// ErrNotReady is returned while the coordinator cannot serve: Postgres or NATS is not
// reachable, or Start has not been called. gRPC edges map it to UNAVAILABLE.
var ErrNotReady = errors.New("group coordinator not ready")

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("group coordinator closed")

// ErrInvalidConfig wraps every Config.Validate failure.
var ErrInvalidConfig = errors.New("invalid group coordinator config")
