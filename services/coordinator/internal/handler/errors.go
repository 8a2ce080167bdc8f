package handler

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// ErrStorage wraps a failed storage-core call; the topic's result carries Kafka
// KAFKA_STORAGE_ERROR (56) with the message.
var ErrStorage = errors.New("storage-core")

// statusError turns an error that fails a whole call into a gRPC status: UNAVAILABLE
// while Postgres cannot be reached (or is not migrated yet), the context's status when
// the caller gave up, INTERNAL otherwise.
func statusError(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case store.Unavailable(err):
		return status.Errorf(codes.Unavailable, "postgres: %v", err)
	default:
		return status.Errorf(codes.Internal, "postgres: %v", err)
	}
}
