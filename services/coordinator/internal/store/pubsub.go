package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PubSubTopic is one registered Pub/Sub topic.
type PubSubTopic struct {
	ID string
	// Spec is the gateway's serialized google.pubsub.v1.Topic (opaque here).
	Spec      []byte
	CreatedAt time.Time
	UpdatedAt time.Time
	// SchemaID is the schema its messages are validated against; empty when none and
	// once that schema was deleted.
	SchemaID string
}

// PubSubSubscription is one registered Pub/Sub subscription.
type PubSubSubscription struct {
	ID string
	// TopicID is empty once the topic was deleted.
	TopicID string
	// Spec is the gateway's serialized google.pubsub.v1.Subscription (opaque here).
	Spec      []byte
	Detached  bool
	CreatedAt time.Time
	UpdatedAt time.Time
	// ExpirationTTLMs is the expiration TTL (0 = never expires); LastActive the last
	// activity (pubsub_expiry.go).
	ExpirationTTLMs int64
	LastActive      time.Time
}

// Advisory lock classes (first key) of the Pub/Sub registry; the second key is
// hashtext of the id.
const (
	pubsubTopicLockClass = 0x70737470 // "pstp"
	pubsubSubLockClass   = 0x70737362 // "pssb"
)

// PubSubTx is a registry transaction holding the locks it took; valid only inside the
// WithPubSubTx callback.
type PubSubTx struct {
	tx pgx.Tx
}

// WithPubSubTx runs fn in one transaction, committed when fn returns nil and rolled back
// otherwise. Locks taken with LockTopic and LockSubscription last until then.
func (s *Store) WithPubSubTx(ctx context.Context, fn func(tx *PubSubTx) error) error {
	if err := s.check(); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return fn(&PubSubTx{tx: tx}) })
}

// LockTopic takes the cluster-wide lock of topic id until the transaction ends.
func (t *PubSubTx) LockTopic(ctx context.Context, id string) error {
	if _, err := t.tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", int32(pubsubTopicLockClass), id); err != nil {
		return fmt.Errorf("lock pubsub topic %s: %w", id, err)
	}
	return nil
}

// LockSubscription takes the cluster-wide lock of subscription id until the
// transaction ends.
func (t *PubSubTx) LockSubscription(ctx context.Context, id string) error {
	if _, err := t.tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", int32(pubsubSubLockClass), id); err != nil {
		return fmt.Errorf("lock pubsub subscription %s: %w", id, err)
	}
	return nil
}

const pubsubTopicColumns = "id, spec, created_at, updated_at, coalesce(schema_id, '')"

func scanPubSubTopic(row pgx.Row) (*PubSubTopic, error) {
	var t PubSubTopic
	if err := row.Scan(&t.ID, &t.Spec, &t.CreatedAt, &t.UpdatedAt, &t.SchemaID); err != nil {
		return nil, err
	}
	return &t, nil
}

const pubsubSubColumns = "id, coalesce(topic_id, ''), spec, detached, created_at, updated_at, coalesce(expiration_ttl_ms, 0), last_active_at"

func scanPubSubSub(row pgx.Row) (*PubSubSubscription, error) {
	var s PubSubSubscription
	if err := row.Scan(&s.ID, &s.TopicID, &s.Spec, &s.Detached, &s.CreatedAt, &s.UpdatedAt, &s.ExpirationTTLMs, &s.LastActive); err != nil {
		return nil, err
	}
	return &s, nil
}

// Topic returns topic id, or ErrTopicNotFound.
func (t *PubSubTx) Topic(ctx context.Context, id string) (*PubSubTopic, error) {
	return getPubSubTopic(ctx, t.tx, id)
}

// Subscription returns subscription id, or ErrSubscriptionNotFound.
func (t *PubSubTx) Subscription(ctx context.Context, id string) (*PubSubSubscription, error) {
	return getPubSubSub(ctx, t.tx, id)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func getPubSubTopic(ctx context.Context, q querier, id string) (*PubSubTopic, error) {
	t, err := scanPubSubTopic(q.QueryRow(ctx, "SELECT "+pubsubTopicColumns+" FROM pubsub_topics WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrTopicNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get pubsub topic %s: %w", id, err)
	}
	return t, nil
}

func getPubSubSub(ctx context.Context, q querier, id string) (*PubSubSubscription, error) {
	s, err := scanPubSubSub(q.QueryRow(ctx, "SELECT "+pubsubSubColumns+" FROM pubsub_subscriptions WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrSubscriptionNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get pubsub subscription %s: %w", id, err)
	}
	return s, nil
}

// InsertTopic registers t (the caller checked it does not exist, under its lock).
func (t *PubSubTx) InsertTopic(ctx context.Context, topic *PubSubTopic) error {
	err := t.tx.QueryRow(ctx, "INSERT INTO pubsub_topics (id, spec, schema_id) VALUES ($1, $2, nullif($3, '')) RETURNING created_at, updated_at",
		topic.ID, nonNil(topic.Spec), topic.SchemaID).Scan(&topic.CreatedAt, &topic.UpdatedAt)
	if err != nil {
		return fmt.Errorf("insert pubsub topic %s: %w", topic.ID, err)
	}
	return nil
}

// UpdateTopicSpec replaces the spec and the schema ("" = none) of topic id.
func (t *PubSubTx) UpdateTopicSpec(ctx context.Context, id string, spec []byte, schemaID string) error {
	tag, err := t.tx.Exec(ctx, "UPDATE pubsub_topics SET spec = $2, schema_id = nullif($3, ''), updated_at = now() WHERE id = $1", id, nonNil(spec), schemaID)
	if err != nil {
		return fmt.Errorf("update pubsub topic %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrTopicNotFound
	}
	return nil
}

// DeleteTopic unregisters topic id and clears the topic of its subscriptions.
func (t *PubSubTx) DeleteTopic(ctx context.Context, id string) error {
	tag, err := t.tx.Exec(ctx, "DELETE FROM pubsub_topics WHERE id = $1", id)
	if err != nil {
		return fmt.Errorf("delete pubsub topic %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrTopicNotFound
	}
	if _, err := t.tx.Exec(ctx, "UPDATE pubsub_subscriptions SET topic_id = NULL, updated_at = now() WHERE topic_id = $1", id); err != nil {
		return fmt.Errorf("orphan subscriptions of pubsub topic %s: %w", id, err)
	}
	return nil
}

// InsertSubscription registers s (the caller checked it does not exist, under its lock).
func (t *PubSubTx) InsertSubscription(ctx context.Context, s *PubSubSubscription) error {
	err := t.tx.QueryRow(ctx, `INSERT INTO pubsub_subscriptions (id, topic_id, spec, expiration_ttl_ms, last_active_at)
		VALUES ($1, $2, $3, $4, coalesce($5, now())) RETURNING created_at, updated_at, last_active_at`,
		s.ID, s.TopicID, nonNil(s.Spec), nullTTL(s.ExpirationTTLMs), nullTime(s.LastActive)).Scan(&s.CreatedAt, &s.UpdatedAt, &s.LastActive)
	if err != nil {
		return fmt.Errorf("insert pubsub subscription %s: %w", s.ID, err)
	}
	return nil
}

// UpdateSubscriptionSpec replaces the spec of subscription id.
func (t *PubSubTx) UpdateSubscriptionSpec(ctx context.Context, id string, spec []byte) error {
	tag, err := t.tx.Exec(ctx, "UPDATE pubsub_subscriptions SET spec = $2, updated_at = now() WHERE id = $1", id, nonNil(spec))
	if err != nil {
		return fmt.Errorf("update pubsub subscription %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrSubscriptionNotFound
	}
	return nil
}

// SetSubscriptionDetached marks subscription id detached.
func (t *PubSubTx) SetSubscriptionDetached(ctx context.Context, id string) error {
	tag, err := t.tx.Exec(ctx, "UPDATE pubsub_subscriptions SET detached = true, updated_at = now() WHERE id = $1", id)
	if err != nil {
		return fmt.Errorf("detach pubsub subscription %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrSubscriptionNotFound
	}
	return nil
}

// DeleteSubscription unregisters subscription id; its snapshots stay.
func (t *PubSubTx) DeleteSubscription(ctx context.Context, id string) error {
	tag, err := t.tx.Exec(ctx, "DELETE FROM pubsub_subscriptions WHERE id = $1", id)
	if err != nil {
		return fmt.Errorf("delete pubsub subscription %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrSubscriptionNotFound
	}
	if _, err := t.tx.Exec(ctx, "UPDATE pubsub_snapshots SET subscription_id = NULL WHERE subscription_id = $1", id); err != nil {
		return fmt.Errorf("orphan snapshots of pubsub subscription %s: %w", id, err)
	}
	return nil
}

// PubSubTopic returns topic id, or ErrTopicNotFound.
func (s *Store) PubSubTopic(ctx context.Context, id string) (*PubSubTopic, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return getPubSubTopic(ctx, s.pool, id)
}

// PubSubSubscription returns subscription id, or ErrSubscriptionNotFound.
func (s *Store) PubSubSubscription(ctx context.Context, id string) (*PubSubSubscription, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return getPubSubSub(ctx, s.pool, id)
}

// PubSubTopics returns up to limit topics with ids after "after", by id.
func (s *Store) PubSubTopics(ctx context.Context, after string, limit int) ([]*PubSubTopic, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT "+pubsubTopicColumns+" FROM pubsub_topics WHERE id > $1 ORDER BY id LIMIT $2", after, limit)
	if err != nil {
		return nil, fmt.Errorf("list pubsub topics: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*PubSubTopic, error) { return scanPubSubTopic(r) })
}

// PubSubSubscriptions returns up to limit subscriptions with ids after "after", by id;
// when topic is not empty, only those attached to topic (a detached subscription no
// longer belongs to its topic: Google's ListTopicSubscriptions "lists the names of the
// attached subscriptions on this topic").
func (s *Store) PubSubSubscriptions(ctx context.Context, topic, after string, limit int) ([]*PubSubSubscription, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q := "SELECT " + pubsubSubColumns + " FROM pubsub_subscriptions WHERE id > $1 AND ($2 = '' OR topic_id = $2 AND NOT detached) ORDER BY id LIMIT $3"
	rows, err := s.pool.Query(ctx, q, after, topic, limit)
	if err != nil {
		return nil, fmt.Errorf("list pubsub subscriptions: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*PubSubSubscription, error) { return scanPubSubSub(r) })
}

// PubSubSnapshot is one registered Pub/Sub snapshot.
type PubSubSnapshot struct {
	ID string
	// SubscriptionID is empty once the subscription was deleted.
	SubscriptionID string
	TopicID        string
	// Spec is the gateway's serialized google.pubsub.v1.Snapshot (opaque here).
	Spec      []byte
	CreatedAt time.Time
}

// pubsubSnapLockClass is the first key of a snapshot's advisory lock.
const pubsubSnapLockClass = 0x7073736e // "pssn"

// LockSnapshot takes the cluster-wide lock of snapshot id until the transaction ends.
func (t *PubSubTx) LockSnapshot(ctx context.Context, id string) error {
	if _, err := t.tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", int32(pubsubSnapLockClass), id); err != nil {
		return fmt.Errorf("lock pubsub snapshot %s: %w", id, err)
	}
	return nil
}

const pubsubSnapColumns = "id, coalesce(subscription_id, ''), topic_id, spec, created_at"

func scanPubSubSnap(row pgx.Row) (*PubSubSnapshot, error) {
	var s PubSubSnapshot
	if err := row.Scan(&s.ID, &s.SubscriptionID, &s.TopicID, &s.Spec, &s.CreatedAt); err != nil {
		return nil, err
	}
	return &s, nil
}

func getPubSubSnap(ctx context.Context, q querier, id string) (*PubSubSnapshot, error) {
	s, err := scanPubSubSnap(q.QueryRow(ctx, "SELECT "+pubsubSnapColumns+" FROM pubsub_snapshots WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrSnapshotNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get pubsub snapshot %s: %w", id, err)
	}
	return s, nil
}

// Snapshot returns snapshot id, or ErrSnapshotNotFound.
func (t *PubSubTx) Snapshot(ctx context.Context, id string) (*PubSubSnapshot, error) {
	return getPubSubSnap(ctx, t.tx, id)
}

// InsertSnapshot registers s (the caller checked it does not exist, under its lock).
func (t *PubSubTx) InsertSnapshot(ctx context.Context, s *PubSubSnapshot) error {
	err := t.tx.QueryRow(ctx, "INSERT INTO pubsub_snapshots (id, subscription_id, topic_id, spec) VALUES ($1, $2, $3, $4) RETURNING created_at",
		s.ID, s.SubscriptionID, s.TopicID, nonNil(s.Spec)).Scan(&s.CreatedAt)
	if err != nil {
		return fmt.Errorf("insert pubsub snapshot %s: %w", s.ID, err)
	}
	return nil
}

// UpdateSnapshotSpec replaces the spec of snapshot id.
func (t *PubSubTx) UpdateSnapshotSpec(ctx context.Context, id string, spec []byte) error {
	tag, err := t.tx.Exec(ctx, "UPDATE pubsub_snapshots SET spec = $2 WHERE id = $1", id, nonNil(spec))
	if err != nil {
		return fmt.Errorf("update pubsub snapshot %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrSnapshotNotFound
	}
	return nil
}

// DeleteSnapshot unregisters snapshot id.
func (t *PubSubTx) DeleteSnapshot(ctx context.Context, id string) error {
	tag, err := t.tx.Exec(ctx, "DELETE FROM pubsub_snapshots WHERE id = $1", id)
	if err != nil {
		return fmt.Errorf("delete pubsub snapshot %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrSnapshotNotFound
	}
	return nil
}

// PubSubSnapshot returns snapshot id, or ErrSnapshotNotFound.
func (s *Store) PubSubSnapshot(ctx context.Context, id string) (*PubSubSnapshot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return getPubSubSnap(ctx, s.pool, id)
}

// PubSubSnapshots returns up to limit snapshots with ids after "after", by id; only
// topic's when topic is not empty.
func (s *Store) PubSubSnapshots(ctx context.Context, topic, after string, limit int) ([]*PubSubSnapshot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q := "SELECT " + pubsubSnapColumns + " FROM pubsub_snapshots WHERE id > $1 AND ($2 = '' OR topic_id = $2) ORDER BY id LIMIT $3"
	rows, err := s.pool.Query(ctx, q, after, topic, limit)
	if err != nil {
		return nil, fmt.Errorf("list pubsub snapshots: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*PubSubSnapshot, error) { return scanPubSubSnap(r) })
}

// nonNil stores an absent spec as an empty one (the column is NOT NULL).
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
