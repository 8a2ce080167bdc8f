package pubsub

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestStatusError pins the gRPC code and message clients (pubsub-gateway) read for each
// kind of failure.
func TestStatusError(t *testing.T) {
	idErr := channel.ValidatePubSubID("x")
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		msg  string
	}{
		{"invalid id", invalid(idErr), codes.InvalidArgument, idErr.Error()},
		{"page size", fail(ErrInvalidArgument, "page size %d is negative", -1), codes.InvalidArgument, "page size -1 is negative"},
		{"topic exists", ErrTopicExists, codes.AlreadyExists, "Topic already exists"},
		{"subscription exists", ErrSubscriptionExists, codes.AlreadyExists, "Subscription already exists"},
		{"snapshot exists", ErrSnapshotExists, codes.AlreadyExists, "Snapshot already exists"},
		{"schema exists", ErrSchemaExists, codes.AlreadyExists, "Schema already exists"},
		{"no topic", fail(ErrNoTopic, "subscription %s has no topic (it was deleted)", "s"), codes.FailedPrecondition, "subscription s has no topic (it was deleted)"},
		{"only revision", fail(ErrOnlyRevision, "revision %s is the only revision of schema %s", "r", "s"), codes.FailedPrecondition, "revision r is the only revision of schema s"},
		{"too many revisions", fail(ErrTooManyRevisions, "schema %s already has %d revisions, the most allowed", "s", 3), codes.ResourceExhausted, "schema s already has 3 revisions, the most allowed"},
		{"no revision id", fail(ErrNoRevisionID, "no free revision id for schema %s after %d draws", "s", 8), codes.Internal, "no free revision id for schema s after 8 draws"},
		{"topic not found", fmt.Errorf("get: %w", store.ErrTopicNotFound), codes.NotFound, "topic not found"},
		{"subscription not found", store.ErrSubscriptionNotFound, codes.NotFound, "subscription not found"},
		{"snapshot not found", store.ErrSnapshotNotFound, codes.NotFound, "snapshot not found"},
		{"schema not found", store.ErrSchemaNotFound, codes.NotFound, "schema not found"},
		{"revision not found", store.ErrSchemaRevisionNotFound, codes.NotFound, "schema revision not found"},
		{"storage code kept", storageError("create queue gcp.sub.s", status.Error(codes.NotFound, "no topic")), codes.NotFound, "storage-core: create queue gcp.sub.s: rpc error: code = NotFound desc = no topic"},
		{"storage without code", storageError("delete channel gcp.t", errors.New("boom")), codes.Unavailable, "storage-core: delete channel gcp.t: boom"},
		{"cancelled", fmt.Errorf("lock: %w", context.Canceled), codes.Canceled, "lock: context canceled"},
		{"store not ready", store.ErrNotReady, codes.Unavailable, "postgres: " + store.ErrNotReady.Error()},
	} {
		st := status.Convert(statusError(tc.err))
		if st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("%s: %v %q, want %v %q", tc.name, st.Code(), st.Message(), tc.code, tc.msg)
		}
	}
	if !errors.Is(invalid(idErr), channel.ErrInvalidPubSubID) {
		t.Errorf("invalid() loses its cause")
	}
}
