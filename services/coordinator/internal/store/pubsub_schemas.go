package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PubSubSchemaRevision is one revision of a Pub/Sub schema.
type PubSubSchemaRevision struct {
	SchemaID   string
	RevisionID string
	// Spec is the gateway's serialized google.pubsub.v1.Schema (opaque here); empty on
	// a tombstone.
	Spec []byte
	// Seq orders a schema's revisions by creation (larger is newer).
	Seq       int64
	CreatedAt time.Time
	// Deleted marks a tombstone left by DeleteSchemaRevision.
	Deleted bool
}

// pubsubSchemaLockClass is the first key of a schema's advisory lock.
const pubsubSchemaLockClass = 0x70737363 // "pssc"

// LockSchema takes the cluster-wide lock of schema id until the transaction ends.
func (t *PubSubTx) LockSchema(ctx context.Context, id string) error {
	if _, err := t.tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", int32(pubsubSchemaLockClass), id); err != nil {
		return fmt.Errorf("lock pubsub schema %s: %w", id, err)
	}
	return nil
}

const pubsubRevColumns = "schema_id, revision_id, spec, seq, created_at, deleted_at IS NOT NULL"

func scanPubSubRev(row pgx.Row) (*PubSubSchemaRevision, error) {
	var r PubSubSchemaRevision
	if err := row.Scan(&r.SchemaID, &r.RevisionID, &r.Spec, &r.Seq, &r.CreatedAt, &r.Deleted); err != nil {
		return nil, err
	}
	return &r, nil
}

// SchemaExists reports whether schema id is registered (ErrSchemaNotFound when not).
func (t *PubSubTx) SchemaExists(ctx context.Context, id string) error {
	var one int
	err := t.tx.QueryRow(ctx, "SELECT 1 FROM pubsub_schemas WHERE id = $1", id).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrSchemaNotFound
	}
	if err != nil {
		return fmt.Errorf("get pubsub schema %s: %w", id, err)
	}
	return nil
}

// InsertSchema registers schema id (the caller checked it does not exist, under its
// lock).
func (t *PubSubTx) InsertSchema(ctx context.Context, id string) error {
	if _, err := t.tx.Exec(ctx, "INSERT INTO pubsub_schemas (id) VALUES ($1)", id); err != nil {
		return fmt.Errorf("insert pubsub schema %s: %w", id, err)
	}
	return nil
}

// InsertSchemaRevision adds r (schema, revision id and spec) to its schema; it fills in
// Seq and CreatedAt. A revision id the schema already has (even as a tombstone) is
// ErrRevisionIDTaken.
func (t *PubSubTx) InsertSchemaRevision(ctx context.Context, r *PubSubSchemaRevision) error {
	tag, err := t.tx.Exec(ctx, "INSERT INTO pubsub_schema_revisions (schema_id, revision_id, spec) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
		r.SchemaID, r.RevisionID, nonNil(r.Spec))
	if err != nil {
		return fmt.Errorf("insert pubsub schema revision %s@%s: %w", r.SchemaID, r.RevisionID, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrRevisionIDTaken
	}
	return t.tx.QueryRow(ctx, "SELECT seq, created_at FROM pubsub_schema_revisions WHERE schema_id = $1 AND revision_id = $2",
		r.SchemaID, r.RevisionID).Scan(&r.Seq, &r.CreatedAt)
}

// LiveSchemaRevisions counts the revisions of schema id that are not deleted.
func (t *PubSubTx) LiveSchemaRevisions(ctx context.Context, id string) (int, error) {
	var n int
	if err := t.tx.QueryRow(ctx, "SELECT count(*) FROM pubsub_schema_revisions WHERE schema_id = $1 AND deleted_at IS NULL", id).Scan(&n); err != nil {
		return 0, fmt.Errorf("count pubsub schema revisions of %s: %w", id, err)
	}
	return n, nil
}

// SchemaRevision returns revision rev of schema id ("" = the latest live one).
// Tombstones count only with includeDeleted. Errors: ErrSchemaNotFound,
// ErrSchemaRevisionNotFound.
func (t *PubSubTx) SchemaRevision(ctx context.Context, id, rev string, includeDeleted bool) (*PubSubSchemaRevision, error) {
	return getPubSubRev(ctx, t.tx, id, rev, includeDeleted)
}

// MarkSchemaRevisionDeleted turns revision rev of schema id into a tombstone.
func (t *PubSubTx) MarkSchemaRevisionDeleted(ctx context.Context, id, rev string) error {
	if _, err := t.tx.Exec(ctx, "UPDATE pubsub_schema_revisions SET deleted_at = now(), spec = '' WHERE schema_id = $1 AND revision_id = $2", id, rev); err != nil {
		return fmt.Errorf("delete pubsub schema revision %s@%s: %w", id, rev, err)
	}
	return nil
}

// DeleteSchema removes schema id with every revision and clears it from the topics
// that used it.
func (t *PubSubTx) DeleteSchema(ctx context.Context, id string) error {
	tag, err := t.tx.Exec(ctx, "DELETE FROM pubsub_schemas WHERE id = $1", id)
	if err != nil {
		return fmt.Errorf("delete pubsub schema %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrSchemaNotFound
	}
	if _, err := t.tx.Exec(ctx, "UPDATE pubsub_topics SET schema_id = NULL, updated_at = now() WHERE schema_id = $1", id); err != nil {
		return fmt.Errorf("clear pubsub schema %s from its topics: %w", id, err)
	}
	return nil
}

func getPubSubRev(ctx context.Context, q querier, id, rev string, includeDeleted bool) (*PubSubSchemaRevision, error) {
	var row pgx.Row
	if rev == "" {
		row = q.QueryRow(ctx, "SELECT "+pubsubRevColumns+" FROM pubsub_schema_revisions WHERE schema_id = $1 AND deleted_at IS NULL ORDER BY seq DESC LIMIT 1", id)
	} else {
		row = q.QueryRow(ctx, "SELECT "+pubsubRevColumns+" FROM pubsub_schema_revisions WHERE schema_id = $1 AND revision_id = $2 AND ($3 OR deleted_at IS NULL)", id, rev, includeDeleted)
	}
	r, err := scanPubSubRev(row)
	if errors.Is(err, pgx.ErrNoRows) {
		var one int
		if err := q.QueryRow(ctx, "SELECT 1 FROM pubsub_schemas WHERE id = $1", id).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			return nil, ErrSchemaNotFound
		} else if err != nil {
			return nil, fmt.Errorf("get pubsub schema %s: %w", id, err)
		}
		return nil, ErrSchemaRevisionNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get pubsub schema revision %s@%s: %w", id, rev, err)
	}
	return r, nil
}

// PubSubSchemaRevision returns revision rev of schema id ("" = the latest live one);
// tombstones count only with includeDeleted. Errors: ErrSchemaNotFound,
// ErrSchemaRevisionNotFound.
func (s *Store) PubSubSchemaRevision(ctx context.Context, id, rev string, includeDeleted bool) (*PubSubSchemaRevision, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return getPubSubRev(ctx, s.pool, id, rev, includeDeleted)
}

// PubSubSchemas returns the latest live revision of up to limit schemas with ids after
// "after", by id.
func (s *Store) PubSubSchemas(ctx context.Context, after string, limit int) ([]*PubSubSchemaRevision, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT DISTINCT ON (schema_id) "+pubsubRevColumns+
		" FROM pubsub_schema_revisions WHERE schema_id > $1 AND deleted_at IS NULL ORDER BY schema_id, seq DESC LIMIT $2", after, limit)
	if err != nil {
		return nil, fmt.Errorf("list pubsub schemas: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*PubSubSchemaRevision, error) { return scanPubSubRev(r) })
}

// PubSubSchemaRevisions returns up to limit live revisions of schema id with fromSeq
// <= seq <= toSeq, oldest first.
func (s *Store) PubSubSchemaRevisions(ctx context.Context, id string, fromSeq, toSeq int64, limit int) ([]*PubSubSchemaRevision, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT "+pubsubRevColumns+
		" FROM pubsub_schema_revisions WHERE schema_id = $1 AND seq >= $2 AND seq <= $3 AND deleted_at IS NULL ORDER BY seq LIMIT $4", id, fromSeq, toSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("list pubsub schema revisions of %s: %w", id, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*PubSubSchemaRevision, error) { return scanPubSubRev(r) })
}
