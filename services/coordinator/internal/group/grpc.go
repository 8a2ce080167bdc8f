package group

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcError is the one place the coordinator's Go errors become gRPC statuses (Kafka
// outcomes are response data, never errors): a caller's cancelled or expired deadline
// keeps its code; everything else means Postgres or NATS could not serve the call, which
// is UNAVAILABLE (gateways answer COORDINATOR_NOT_AVAILABLE and clients retry).
func grpcError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	default:
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Error(codes.Unavailable, err.Error())
	}
}
