package pubsub

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// errStorage marks a failed storage-core call; its status code is kept.
type errStorage struct {
	what string
	err  error
}

func (e *errStorage) Error() string { return fmt.Sprintf("storage-core: %s: %v", e.what, e.err) }
func (e *errStorage) Unwrap() error { return e.err }

func storageError(what string, err error) error { return &errStorage{what: what, err: err} }

// statusCodes is the one table from this package's sentinels and the store's to gRPC
// codes. A fixed message replaces the error's own text (Google's wording for the
// ALREADY_EXISTS answers); without one the client reads err.Error().
var statusCodes = []struct {
	err  error
	code codes.Code
	msg  string
}{
	{ErrInvalidArgument, codes.InvalidArgument, ""},
	{ErrTopicExists, codes.AlreadyExists, "Topic already exists"},
	{ErrSubscriptionExists, codes.AlreadyExists, "Subscription already exists"},
	{ErrSnapshotExists, codes.AlreadyExists, "Snapshot already exists"},
	{ErrSchemaExists, codes.AlreadyExists, "Schema already exists"},
	{ErrNoTopic, codes.FailedPrecondition, ""},
	{ErrOnlyRevision, codes.FailedPrecondition, ""},
	{ErrTooManyRevisions, codes.ResourceExhausted, ""},
	{ErrNoRevisionID, codes.Internal, ""},
	{store.ErrTopicNotFound, codes.NotFound, "topic not found"},
	{store.ErrSubscriptionNotFound, codes.NotFound, "subscription not found"},
	{store.ErrSnapshotNotFound, codes.NotFound, "snapshot not found"},
	{store.ErrSchemaNotFound, codes.NotFound, "schema not found"},
	{store.ErrSchemaRevisionNotFound, codes.NotFound, "schema revision not found"},
}

// statusError turns err into the call's gRPC status, the one place this package does:
// a storage-core failure with storage-core's code (UNAVAILABLE when it had none), a
// cancelled or expired call as such, a sentinel by statusCodes, a status error as it
// is, Postgres trouble as UNAVAILABLE and anything else as INTERNAL.
func statusError(err error) error {
	var se *errStorage
	switch {
	case errors.As(err, &se):
		st, ok := status.FromError(se.err)
		if !ok || st.Code() == codes.Unknown {
			return status.Error(codes.Unavailable, se.Error())
		}
		return status.Error(st.Code(), se.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	for _, c := range statusCodes {
		if errors.Is(err, c.err) {
			msg := c.msg
			if msg == "" {
				msg = err.Error()
			}
			return status.Error(c.code, msg)
		}
	}
	if st, ok := status.FromError(err); ok {
		return st.Err()
	}
	if store.Unavailable(err) {
		return status.Errorf(codes.Unavailable, "postgres: %v", err)
	}
	return status.Errorf(codes.Internal, "postgres: %v", err)
}
