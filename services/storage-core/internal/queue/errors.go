package queue

import "errors"

// Sentinel errors of the queue engine. Callers match them with errors.Is; the gRPC edge
// (internal/server) maps each to a status code. Channel-level errors of the log engine
// (store.ErrNotFound for a missing source log, store.ErrStorage, ...) pass through
// wrapped.
var (
	// ErrNotFound: the queue does not exist (or was deleted under the call).
	ErrNotFound = errors.New("queue not found")
	// ErrExists: CreateQueue of an existing queue (or channel of that name).
	ErrExists = errors.New("queue already exists")
	// ErrInvalidArgument: a bad argument (bounds, config value, filter, binding).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrDetached: the queue is detached (Detach); it no longer delivers.
	ErrDetached = errors.New("queue is detached")
	// ErrSnapshotNotFound: no snapshot of that name.
	ErrSnapshotNotFound = errors.New("snapshot not found")
	// ErrSnapshotExists: CreateSnapshot with a name already taken.
	ErrSnapshotExists = errors.New("snapshot already exists")
	// ErrSnapshotMismatch: Seek to a snapshot of a queue that shares no source with
	// this one (Pub/Sub: a snapshot of another topic). gRPC FAILED_PRECONDITION.
	ErrSnapshotMismatch = errors.New("snapshot is of a queue on other sources")
	// ErrNotQueue: the channel exists but is a log, not a queue.
	ErrNotQueue = errors.New("channel is not a queue")
	// ErrState: the delivery-state database failed (disk); the call's effect is not
	// durable. gRPC UNAVAILABLE.
	ErrState = errors.New("queue state storage failure")
	// ErrClosed: the engine is shutting down.
	ErrClosed = errors.New("queue engine closed")
)
