package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PubSubExpiry is a subscription's expiration state.
type PubSubExpiry struct {
	// TTLMs is the expiration TTL; 0 = never expires.
	TTLMs      int64
	LastActive time.Time
}

func nullTTL(ttlMs int64) any {
	if ttlMs <= 0 {
		return nil
	}
	return ttlMs
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// SetSubscriptionExpiry sets the expiration TTL of subscription id (0 = never) and its
// last activity to at (a create or an update restarts the expiration clock).
func (t *PubSubTx) SetSubscriptionExpiry(ctx context.Context, id string, ttlMs int64, at time.Time) error {
	tag, err := t.tx.Exec(ctx, "UPDATE pubsub_subscriptions SET expiration_ttl_ms = $2, last_active_at = $3 WHERE id = $1", id, nullTTL(ttlMs), at)
	if err != nil {
		return fmt.Errorf("set expiry of pubsub subscription %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrSubscriptionNotFound
	}
	return nil
}

// SubscriptionExpiry returns the expiration state of subscription id, locking its row
// until the transaction ends (an activity report meanwhile waits, then finds it gone
// or counts). ErrSubscriptionNotFound when missing.
func (t *PubSubTx) SubscriptionExpiry(ctx context.Context, id string) (PubSubExpiry, error) {
	var e PubSubExpiry
	var ttl *int64
	err := t.tx.QueryRow(ctx, "SELECT expiration_ttl_ms, last_active_at FROM pubsub_subscriptions WHERE id = $1 FOR UPDATE", id).Scan(&ttl, &e.LastActive)
	if errors.Is(err, pgx.ErrNoRows) {
		return e, ErrSubscriptionNotFound
	}
	if err != nil {
		return e, fmt.Errorf("get expiry of pubsub subscription %s: %w", id, err)
	}
	if ttl != nil {
		e.TTLMs = *ttl
	}
	return e, nil
}

// PubSubExpiryOf returns the expiration state of subscription id (no lock).
func (s *Store) PubSubExpiryOf(ctx context.Context, id string) (PubSubExpiry, error) {
	var e PubSubExpiry
	if err := s.check(); err != nil {
		return e, err
	}
	var ttl *int64
	err := s.pool.QueryRow(ctx, "SELECT expiration_ttl_ms, last_active_at FROM pubsub_subscriptions WHERE id = $1", id).Scan(&ttl, &e.LastActive)
	if errors.Is(err, pgx.ErrNoRows) {
		return e, ErrSubscriptionNotFound
	}
	if err != nil {
		return e, fmt.Errorf("get expiry of pubsub subscription %s: %w", id, err)
	}
	if ttl != nil {
		e.TTLMs = *ttl
	}
	return e, nil
}

// RecordPubSubActivity moves the last activity of the subscriptions ids to at (never
// back). One statement; unknown ids are ignored.
func (s *Store) RecordPubSubActivity(ctx context.Context, ids []string, at time.Time) error {
	if err := s.check(); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, "UPDATE pubsub_subscriptions SET last_active_at = $2 WHERE id = ANY($1) AND last_active_at < $2", ids, at); err != nil {
		return fmt.Errorf("record pubsub activity: %w", err)
	}
	return nil
}

// ExpiredPubSubSubscriptions returns up to limit ids of subscriptions whose last
// activity is more than their TTL before now.
func (s *Store) ExpiredPubSubSubscriptions(ctx context.Context, now time.Time, limit int) ([]string, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id FROM pubsub_subscriptions WHERE expiration_ttl_ms IS NOT NULL
		AND last_active_at + expiration_ttl_ms * interval '1 millisecond' <= $1 ORDER BY id LIMIT $2`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("find expired pubsub subscriptions: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Expired reports whether e's TTL passed at now.
func (e PubSubExpiry) Expired(now time.Time) bool {
	return e.TTLMs > 0 && !now.Before(e.LastActive.Add(time.Duration(e.TTLMs)*time.Millisecond))
}
