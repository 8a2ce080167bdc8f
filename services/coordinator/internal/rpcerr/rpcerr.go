// Package rpcerr turns the coordinator's Go errors into gRPC statuses, the one rule
// every coordinator service follows (Kafka outcomes are response data, never errors).
package rpcerr

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Status maps the failure of a whole call to a gRPC status: nil stays nil; the caller's
// cancelled or expired context keeps its code (CANCELED, DEADLINE_EXCEEDED); an error
// that already is a status is returned as it is; anything else means Postgres or NATS
// could not serve the call, UNAVAILABLE, which gateways answer as
// COORDINATOR_NOT_AVAILABLE so clients retry.
func Status(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unavailable, err.Error())
}
