package topicconfig

import "errors"

// Errors returned by validation and alteration; each maps to one Kafka error code in
// the handler (see the doc comment of each).
var (
	// ErrUnknownConfig is returned for a config name that is not a Kafka topic config
	// (Kafka INVALID_CONFIG, 40).
	ErrUnknownConfig = errors.New("unknown topic config name")
	// ErrInvalidValue is returned for a value its config does not accept (Kafka
	// INVALID_CONFIG, 40).
	ErrInvalidValue = errors.New("invalid config value")
	// ErrNotList is returned for APPEND or SUBTRACT on a config that is not a list (Kafka
	// INVALID_CONFIG, 40).
	ErrNotList = errors.New("config is not a list")
	// ErrInvalidRequest is returned for a malformed alteration: an unknown op or the
	// same config named twice (Kafka INVALID_REQUEST, 42).
	ErrInvalidRequest = errors.New("invalid config alteration")
)
