package handler

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Messages of the NOT_FOUND statuses, as the emulator words them.
const (
	msgTopicNotFound      = "Topic not found"
	msgSubNotFound        = "Subscription does not exist"
	msgDeadLetterNotFound = "Dead letter topic not found"
)

// backendError maps a failed coordinator or storage-core call to the status a Pub/Sub
// client gets: NOT_FOUND with notFound as message; the codes a client can act on
// (INVALID_ARGUMENT, ALREADY_EXISTS, FAILED_PRECONDITION, RESOURCE_EXHAUSTED,
// OUT_OF_RANGE, and UNIMPLEMENTED for a queue feature storage-core lacks) as they are;
// the caller's own cancellation as CANCELLED / DEADLINE_EXCEEDED; everything else as
// UNAVAILABLE, which clients retry.
func backendError(ctx context.Context, err error, notFound string) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	st, ok := status.FromError(err)
	if !ok {
		return status.Error(codes.Unavailable, err.Error())
	}
	switch st.Code() {
	case codes.NotFound:
		if notFound != "" {
			return status.Error(codes.NotFound, notFound)
		}
		return st.Err()
	case codes.InvalidArgument, codes.AlreadyExists, codes.FailedPrecondition, codes.ResourceExhausted,
		codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.OutOfRange, codes.Unimplemented:
		return st.Err()
	default:
		return status.Error(codes.Unavailable, st.Message())
	}
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}
