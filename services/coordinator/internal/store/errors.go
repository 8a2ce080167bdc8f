package store

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Errors returned by Store methods.
var (
	// ErrNotReady is returned while the database has not been created and migrated yet
	// (callers answer UNAVAILABLE).
	ErrNotReady = errors.New("not created and migrated yet")
	// ErrTopicNotFound is returned when no topic has the given name or id.
	ErrTopicNotFound = errors.New("topic not found")
	// ErrTopicExists is returned by InsertTopic for a name or id already registered.
	ErrTopicExists = errors.New("topic already exists")
	// ErrSubscriptionNotFound is returned when no Pub/Sub subscription has the given id.
	ErrSubscriptionNotFound = errors.New("subscription not found")
	// ErrSnapshotNotFound is returned when no Pub/Sub snapshot has the given id.
	ErrSnapshotNotFound = errors.New("snapshot not found")
	// ErrSchemaNotFound is returned when no Pub/Sub schema has the given id.
	ErrSchemaNotFound = errors.New("schema not found")
	// ErrSchemaRevisionNotFound is returned when a Pub/Sub schema has no revision with
	// the given id (or, where tombstones do not count, only a deleted one).
	ErrSchemaRevisionNotFound = errors.New("schema revision not found")
	// ErrRevisionIDTaken is returned by InsertSchemaRevision when the schema already
	// has the revision id (the caller draws another).
	ErrRevisionIDTaken = errors.New("schema revision id taken")
	// ErrCredentialNotFound is returned by GetScramCredential for a user without a
	// credential of the mechanism.
	ErrCredentialNotFound = errors.New("scram credential not found")
	// ErrMqttUserNotFound is returned by GetMqttUser and DeleteMqttUser for a user
	// not kept.
	ErrMqttUserNotFound = errors.New("mqtt user not found")
	// ErrTxnNotFound is returned by LockTxn when a transactional id has no row.
	ErrTxnNotFound = errors.New("transactional id not found")
)

// Unavailable reports whether err means Postgres could not be reached, is not ready or
// is shedding load (rather than refusing a statement): callers answer gRPC UNAVAILABLE.
// PgErrors of class 08 (connection exception), 53 (insufficient resources) and 57P
// (operator intervention: shutdown, cannot connect now) count as unavailable.
func Unavailable(err error) bool {
	if errors.Is(err, ErrNotReady) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true
	}
	return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "53") || strings.HasPrefix(pgErr.Code, "57P")
}
