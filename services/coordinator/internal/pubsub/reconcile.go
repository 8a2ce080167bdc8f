package pubsub

import (
	"context"
	"errors"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/pubsubspec"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// Reconcile creates the channels of registered Pub/Sub resources that storage-core
// lacks (e.g. after its data directory was lost while Postgres kept the registry), so
// every visible topic and subscription is usable again: each topic gets its log
// gcp.<topic>, each subscription that is not detached its queue gcp.sub.<subscription>
// bound to its topic's log with its filter (no binding once its topic was deleted).
// The settings come from the stored specs (pubsubspec), as the gateway built them at
// create and update. The records are gone: the new channels start empty.
//
// It lists storage-core's Pub/Sub channels (channel.PubSubPrefix) once without a lock,
// then, for each resource missing its channel, re-reads it under its lock (a
// subscription's, then its topic's: LOCKS.md) and creates the channel with
// if_not_exists, so a concurrent create or another coordinator replica doing the same
// is harmless. Topics come first: a queue binds to its topic's log and may name another
// topic's log as its dead-letter channel. A failure on one resource does not stop the
// others; the first error is returned with the number of channels created.
func (r *Registry) Reconcile(ctx context.Context) (int, error) {
	list, err := r.storage.ListChannels(ctx, &storagev1.ListChannelsRequest{Prefix: channel.PubSubPrefix})
	if err != nil {
		return 0, storageError("list channels", err)
	}
	have := make(map[string]bool, len(list.GetChannels()))
	for _, c := range list.GetChannels() {
		have[c.GetName()] = true
	}
	created := 0
	var first error
	note := func(ok bool, err error, what string, f zap.Field) {
		if ok {
			created++
			r.log.Warn("recreated the missing channel of a registered Pub/Sub "+what, f)
		}
		if err != nil {
			r.log.Warn("could not recreate the missing channel of a registered Pub/Sub "+what, f, zap.Error(err))
			if first == nil {
				first = err
			}
		}
	}
	err = eachPage(func(after string) ([]*store.PubSubTopic, error) {
		return r.store.PubSubTopics(ctx, after, maxPageSize)
	}, func(t *store.PubSubTopic) string { return t.ID }, func(t *store.PubSubTopic) {
		if !have[channel.PubSubTopic(t.ID)] {
			ok, err := r.restoreTopic(ctx, t.ID)
			note(ok, err, "topic", zap.String("topic", t.ID))
		}
	})
	if err != nil {
		return created, err
	}
	err = eachPage(func(after string) ([]*store.PubSubSubscription, error) {
		return r.store.PubSubSubscriptions(ctx, "", after, maxPageSize)
	}, func(s *store.PubSubSubscription) string { return s.ID }, func(s *store.PubSubSubscription) {
		if !s.Detached && !have[channel.PubSubSubscription(s.ID)] {
			ok, err := r.restoreSubscription(ctx, s.ID)
			note(ok, err, "subscription", zap.String("subscription", s.ID))
		}
	})
	if err != nil {
		return created, err
	}
	return created, first
}

// eachPage calls fn on every row of the pages list returns (maxPageSize rows by id,
// after the id of the previous page's last row).
func eachPage[R any](list func(after string) ([]R, error), id func(R) string, fn func(R)) error {
	after := ""
	for {
		rows, err := list(after)
		if err != nil {
			return err
		}
		for _, row := range rows {
			fn(row)
		}
		if len(rows) < maxPageSize {
			return nil
		}
		after = id(rows[len(rows)-1])
	}
}

// restoreTopic creates the log of registered topic id if it is missing, under the
// topic's lock; created is false when the topic is gone or its log exists.
func (r *Registry) restoreTopic(ctx context.Context, id string) (created bool, err error) {
	err = r.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockTopic(ctx, id); err != nil {
			return err
		}
		t, err := tx.Topic(ctx, id)
		if errors.Is(err, store.ErrTopicNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		spec := &pubsubpb.Topic{}
		if err := proto.Unmarshal(t.Spec, spec); err != nil {
			return fail(ErrInvalidSpec, "topic %s: %v", id, err)
		}
		resp, err := r.createLog(ctx, id, pubsubspec.TopicChannelConfig(spec))
		created = resp.GetCreated()
		return err
	})
	return created, err
}

// restoreSubscription creates the queue of registered subscription id if it is missing
// and it is not detached, under the subscription's lock, then its topic's; created is
// false when the subscription is gone or detached, or its queue exists.
func (r *Registry) restoreSubscription(ctx context.Context, id string) (created bool, err error) {
	err = r.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockSubscription(ctx, id); err != nil {
			return err
		}
		s, err := tx.Subscription(ctx, id)
		if errors.Is(err, store.ErrSubscriptionNotFound) || err == nil && s.Detached {
			return nil
		}
		if err != nil {
			return err
		}
		if s.TopicID != "" {
			// Held so a DeleteTopic cannot slip between here and the queue's binding
			// (it clears the topic of its subscriptions under this lock).
			if err := tx.LockTopic(ctx, s.TopicID); err != nil {
				return err
			}
			if s, err = tx.Subscription(ctx, id); err != nil {
				return err
			}
		}
		spec := &pubsubpb.Subscription{}
		if err := proto.Unmarshal(s.Spec, spec); err != nil {
			return fail(ErrInvalidSpec, "subscription %s: %v", id, err)
		}
		req := queueRequest(id, s.TopicID, spec.GetFilter(), pubsubspec.QueueConfig(spec, pubsubspec.Project(spec.GetName()), id))
		req.IfNotExists = true
		resp, err := r.queues.CreateQueue(ctx, req)
		if err != nil {
			return storageError("create queue "+req.GetName(), err)
		}
		created = resp.GetCreated()
		return nil
	})
	return created, err
}
