package pubsub

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// Subscription expiration (google.pubsub.v1.ExpirationPolicy). "A subscription is
// considered active as long as any connected subscriber is successfully consuming
// messages from the subscription or is issuing operations on the subscription"; an
// update of the subscription restarts the clock too. Publishing to the topic does not
// count. The gateways report activity (RecordPubSubActivity, at most once a minute per
// subscription and replica); create and update set it here. ExpireSubscriptions runs
// on the coordinator replica holding the sweep lock (group.Coordinator.AddSweep).

// expireBatch bounds the subscriptions one sweep deletes.
const expireBatch = 100

// RecordPubSubActivity restarts the expiration clock of the named subscriptions.
func (r *Registry) RecordPubSubActivity(ctx context.Context, req *coordinatorv1.RecordPubSubActivityRequest) (*coordinatorv1.RecordPubSubActivityResponse, error) {
	if len(req.GetSubscriptionIds()) > 0 {
		if err := r.store.RecordPubSubActivity(ctx, req.GetSubscriptionIds(), r.now()); err != nil {
			return nil, statusError(err)
		}
	}
	return &coordinatorv1.RecordPubSubActivityResponse{}, nil
}

// ExpireSubscriptions deletes the subscriptions whose TTL passed without activity at
// now: each under its lock, re-checked on the locked row, queue first, then the row
// (as DeletePubSubSubscription). A failure leaves that subscription for the next sweep.
func (r *Registry) ExpireSubscriptions(ctx context.Context, now time.Time) error {
	ids, err := r.store.ExpiredPubSubSubscriptions(ctx, now, expireBatch)
	if err != nil {
		return err
	}
	for _, id := range ids {
		expired := false
		err := r.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
			if err := tx.LockSubscription(ctx, id); err != nil {
				return err
			}
			e, err := tx.SubscriptionExpiry(ctx, id)
			if err != nil {
				return err
			}
			if !e.Expired(now) {
				return nil // active again since the query
			}
			name := channel.PubSubSubscription(id)
			if _, err := r.queues.DeleteQueue(ctx, &storagev1.DeleteQueueRequest{Name: name, IfExists: true}); err != nil {
				return storageError("delete queue "+name, err)
			}
			expired = true
			return tx.DeleteSubscription(ctx, id)
		})
		switch {
		case errors.Is(err, store.ErrSubscriptionNotFound):
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.log.Warn("could not expire a subscription; retrying at the next sweep", zap.String("subscription", id), zap.Error(err))
		case expired:
			r.log.Info("subscription expired", zap.String("subscription", id))
		}
	}
	return nil
}
