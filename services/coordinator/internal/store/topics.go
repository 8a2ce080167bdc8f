package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Topic is one registered Kafka topic.
type Topic struct {
	Name string
	// ID is the Kafka topic id (UUID v4).
	ID         [16]byte
	Partitions int32
	// Configs holds the explicitly set configs only.
	Configs   map[string]string
	CreatedAt time.Time
}

// topicLockClass is the first key of the two-key advisory locks that serialize changes
// to one topic (the second key is hashtext of the topic's collision key).
const topicLockClass = 0x74726962 // "trib"

// CollisionKey is the name Kafka uses to detect colliding topics: "." and "_" are
// interchangeable in metric names, so "a.b" and "a_b" may not both exist.
func CollisionKey(name string) string { return strings.ReplaceAll(name, ".", "_") }

// Locked gives access to the registry while the caller holds a topic's lock. Its
// methods run on the connection that holds the lock; it is valid only inside the
// WithTopicLock callback.
type Locked struct {
	conn *pgxpool.Conn
}

// WithTopicLock runs fn while holding the cluster-wide advisory lock for topic name
// (keyed by CollisionKey, so colliding names serialize too). Other coordinator
// replicas changing the same topic wait. The lock is released when fn returns; if the
// unlock fails the session is closed, which releases it as well.
func (s *Store) WithTopicLock(ctx context.Context, name string, fn func(l *Locked) error) error {
	if err := s.check(); err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	key := CollisionKey(name)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, hashtext($2))", int32(topicLockClass), key); err != nil {
		conn.Release()
		return fmt.Errorf("lock topic %s: %w", name, err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock($1, hashtext($2))", int32(topicLockClass), key); err != nil {
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}()
	return fn(&Locked{conn: conn})
}

const topicColumns = "name, topic_id, partitions, configs, created_at"

func scanTopic(row pgx.Row) (*Topic, error) {
	var t Topic
	if err := row.Scan(&t.Name, &t.ID, &t.Partitions, &t.Configs, &t.CreatedAt); err != nil {
		return nil, err
	}
	if t.Configs == nil {
		t.Configs = map[string]string{}
	}
	return &t, nil
}

// Get returns the topic named name, or ErrTopicNotFound.
func (l *Locked) Get(ctx context.Context, name string) (*Topic, error) {
	t, err := scanTopic(l.conn.QueryRow(ctx, "SELECT "+topicColumns+" FROM topics WHERE name = $1", name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrTopicNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get topic %s: %w", name, err)
	}
	return t, nil
}

// Collision returns an existing topic other than name with the same CollisionKey.
func (l *Locked) Collision(ctx context.Context, name string) (string, bool, error) {
	var other string
	err := l.conn.QueryRow(ctx, "SELECT name FROM topics WHERE replace(name, '.', '_') = $1 AND name <> $2 LIMIT 1", CollisionKey(name), name).Scan(&other)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("check topic collisions for %s: %w", name, err)
	}
	return other, true, nil
}

// Insert registers t, making it visible. ErrTopicExists when the name or id is taken.
func (l *Locked) Insert(ctx context.Context, t *Topic) error {
	configs := t.Configs
	if configs == nil {
		configs = map[string]string{}
	}
	err := l.conn.QueryRow(ctx,
		"INSERT INTO topics (name, topic_id, partitions, configs) VALUES ($1, $2, $3, $4) RETURNING created_at",
		t.Name, t.ID, t.Partitions, configs).Scan(&t.CreatedAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateUniqueViolation {
		return ErrTopicExists
	}
	if err != nil {
		return fmt.Errorf("insert topic %s: %w", t.Name, err)
	}
	return nil
}

// Delete unregisters the topic named name; ErrTopicNotFound when it is not there.
//
// The groups' committed offsets of the topic go with it, in the same statement, as
// Kafka's group coordinator deletes the offsets of deleted partitions
// (onPartitionsDeleted): a topic created again under the name starts without them.
func (l *Locked) Delete(ctx context.Context, name string) error {
	var n int
	err := l.conn.QueryRow(ctx, `WITH t AS (DELETE FROM topics WHERE name = $1 RETURNING name),
		o AS (DELETE FROM consumer_group_offsets WHERE topic IN (SELECT name FROM t))
		SELECT count(*) FROM t`, name).Scan(&n)
	if err != nil {
		return fmt.Errorf("delete topic %s: %w", name, err)
	}
	if n == 0 {
		return ErrTopicNotFound
	}
	return nil
}

// SetPartitions records a new partition count for topic name.
func (l *Locked) SetPartitions(ctx context.Context, name string, partitions int32) error {
	tag, err := l.conn.Exec(ctx, "UPDATE topics SET partitions = $2, updated_at = now() WHERE name = $1", name, partitions)
	if err != nil {
		return fmt.Errorf("set partitions of %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrTopicNotFound
	}
	return nil
}

// SetConfigs replaces the explicitly set configs of topic name.
func (l *Locked) SetConfigs(ctx context.Context, name string, configs map[string]string) error {
	if configs == nil {
		configs = map[string]string{}
	}
	tag, err := l.conn.Exec(ctx, "UPDATE topics SET configs = $2, updated_at = now() WHERE name = $1", name, configs)
	if err != nil {
		return fmt.Errorf("set configs of %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrTopicNotFound
	}
	return nil
}

// Topics returns the named topics that exist, by name.
func (s *Store) Topics(ctx context.Context, names []string) (map[string]*Topic, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT "+topicColumns+" FROM topics WHERE name = ANY($1)", names)
	if err != nil {
		return nil, fmt.Errorf("get topics: %w", err)
	}
	out := make(map[string]*Topic, len(names))
	for rows.Next() {
		t, err := scanTopic(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("get topics: %w", err)
		}
		out[t.Name] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get topics: %w", err)
	}
	return out, nil
}

// AllTopics returns every topic, sorted by name.
func (s *Store) AllTopics(ctx context.Context) ([]*Topic, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT "+topicColumns+" FROM topics ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	var out []*Topic
	for rows.Next() {
		t, err := scanTopic(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("list topics: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	return out, nil
}

// TopicNameByID returns the name of the topic with id, or ErrTopicNotFound.
func (s *Store) TopicNameByID(ctx context.Context, id [16]byte) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	var name string
	err := s.pool.QueryRow(ctx, "SELECT name FROM topics WHERE topic_id = $1", id).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrTopicNotFound
	}
	if err != nil {
		return "", fmt.Errorf("get topic by id: %w", err)
	}
	return name, nil
}

// CountTopics returns the number of registered topics.
func (s *Store) CountTopics(ctx context.Context) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM topics").Scan(&n); err != nil {
		return 0, fmt.Errorf("count topics: %w", err)
	}
	return n, nil
}
