package store

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Errors returned by Store methods.
var (
	// ErrNotReady is returned while the database has not been created and migrated yet
	// (callers answer UNAVAILABLE).
	ErrNotReady = errors.New("postgres not ready: schema not migrated yet")
	// ErrTopicNotFound is returned when no topic has the given name or id.
	ErrTopicNotFound = errors.New("topic not found")
	// ErrTopicExists is returned by InsertTopic for a name or id already registered.
	ErrTopicExists = errors.New("topic already exists")
)

// Unavailable reports whether err means Postgres could not be reached or is not ready
// (rather than a statement it refused): callers answer gRPC UNAVAILABLE.
func Unavailable(err error) bool {
	if errors.Is(err, ErrNotReady) {
		return true
	}
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr)
}
