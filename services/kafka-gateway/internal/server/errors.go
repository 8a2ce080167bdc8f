package server

import "errors"

// Sentinel errors of the server package.
var (
	// ErrConfig is returned by Config.Validate for an unusable configuration.
	ErrConfig = errors.New("invalid config")
	// ErrFrameTooLarge is returned when a client announces a frame above the limit.
	ErrFrameTooLarge = errors.New("kafka frame too large")
	// ErrBadFrame is returned for a frame whose request header cannot be parsed.
	ErrBadFrame = errors.New("malformed kafka frame")
	// ErrUnknownAPI is returned for a request with an API key the gateway does not know.
	ErrUnknownAPI = errors.New("unknown kafka api key")
)
