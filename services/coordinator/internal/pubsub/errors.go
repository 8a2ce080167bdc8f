package pubsub

import (
	"errors"
	"fmt"
)

// Sentinel errors of the Pub/Sub registry and schema service. Handlers return them
// (bare or through fail, which adds the message the client reads); statusError
// (grpc.go) is the one place that turns them, the store's errors and storage-core's
// into the gRPC status pubsub-gateway sees.
var (
	// ErrInvalidArgument is a request field refused here: a topic, subscription,
	// snapshot or schema id libs/channel refuses, a negative page size, or a page token
	// not handed out by this service. INVALID_ARGUMENT, with the reason as message.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrTopicExists is CreatePubSubTopic of a registered id: ALREADY_EXISTS
	// "Topic already exists" (Google's message).
	ErrTopicExists = errors.New("topic already exists")
	// ErrSubscriptionExists is CreatePubSubSubscription of a registered id:
	// ALREADY_EXISTS "Subscription already exists".
	ErrSubscriptionExists = errors.New("subscription already exists")
	// ErrSnapshotExists is CreatePubSubSnapshot of a registered id: ALREADY_EXISTS
	// "Snapshot already exists".
	ErrSnapshotExists = errors.New("snapshot already exists")
	// ErrSchemaExists is CreatePubSubSchema of a registered id: ALREADY_EXISTS
	// "Schema already exists".
	ErrSchemaExists = errors.New("schema already exists")
	// ErrNoTopic is CreatePubSubSnapshot of a subscription whose topic was deleted:
	// FAILED_PRECONDITION.
	ErrNoTopic = errors.New("subscription has no topic")
	// ErrOnlyRevision is DeletePubSubSchemaRevision of a schema's only live revision
	// (delete the schema instead): FAILED_PRECONDITION.
	ErrOnlyRevision = errors.New("only revision of the schema")
	// ErrTooManyRevisions is CommitPubSubSchemaRevision past max_revisions live
	// revisions: RESOURCE_EXHAUSTED.
	ErrTooManyRevisions = errors.New("schema has the most revisions allowed")
	// ErrNoRevisionID is returned when every draw of a new revision id clashed with one
	// the schema has (revisionIDAttempts draws of 32 random bits): INTERNAL.
	ErrNoRevisionID = errors.New("no free revision id")
	// ErrInvalidSpec is a registered topic's or subscription's stored spec that is not
	// a serialized google.pubsub.v1.Topic or Subscription: Reconcile cannot rebuild its
	// channel (it logs and skips it).
	ErrInvalidSpec = errors.New("stored spec does not decode")
)

// failure is a sentinel (kind) with the message the client reads: Error is msg, and
// errors.Is matches kind and, when set, cause.
type failure struct {
	kind  error
	msg   string
	cause error
}

func (f *failure) Error() string { return f.msg }

func (f *failure) Unwrap() []error {
	if f.cause == nil {
		return []error{f.kind}
	}
	return []error{f.kind, f.cause}
}

// fail returns kind with a formatted message for the client.
func fail(kind error, format string, args ...any) error {
	return &failure{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// invalid wraps a validation error (libs/channel's) as ErrInvalidArgument, its text
// the message.
func invalid(cause error) error {
	return &failure{kind: ErrInvalidArgument, msg: cause.Error(), cause: cause}
}
