package grpcx

import "errors"

// ErrAuthConfig reports unusable authentication settings: a credentials file or JWT key
// that cannot be read or parsed, a token without TLS, auth without TLS.
var ErrAuthConfig = errors.New("auth config")

// ErrRights reports a right that cannot be parsed (see ParseRight).
var ErrRights = errors.New("bad right")
