// Package pubsub implements tributary.coordinator.v1.PubSubRegistryService: the Pub/Sub
// topics and subscriptions, kept in Postgres (package store), with the storage-core
// channels behind them: log gcp.<topic> and queue gcp.sub.<subscription> bound to its
// topic's log. The gateway owns the Pub/Sub semantics and stores each resource's
// settings as an opaque spec; this package keeps ids unique, a subscription's topic
// existing, and the channels in step with the rows.
//
// Order of work: storage-core first, then the row, all under the id's transaction lock,
// so a visible topic always has its log and a visible subscription its queue. Locks are
// taken subscription first, then topic (LOCKS.md).
package pubsub

import (
	"context"
	"encoding/base64"
	"errors"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// Page sizes of the List calls.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

// Registry serves PubSubRegistryService.
type Registry struct {
	coordinatorv1.UnimplementedPubSubRegistryServiceServer

	store   *store.Store
	storage storagev1.StorageServiceClient
	queues  storagev1.QueueServiceClient
	log     *zap.Logger
	now     func() time.Time
}

// New returns a Registry over st, storage-core's channel and queue services. now is the
// clock of activity and expiration (time.Now when nil).
func New(st *store.Store, storage storagev1.StorageServiceClient, queues storagev1.QueueServiceClient, log *zap.Logger, now func() time.Time) *Registry {
	if now == nil {
		now = time.Now
	}
	return &Registry{store: st, storage: storage, queues: queues, log: log, now: now}
}

func topicProto(t *store.PubSubTopic) *coordinatorv1.PubSubTopic {
	return &coordinatorv1.PubSubTopic{Id: t.ID, Spec: t.Spec, CreatedMs: t.CreatedAt.UnixMilli(), UpdatedMs: t.UpdatedAt.UnixMilli(), SchemaId: t.SchemaID}
}

func subProto(s *store.PubSubSubscription) *coordinatorv1.PubSubSubscription {
	return &coordinatorv1.PubSubSubscription{
		Id: s.ID, TopicId: s.TopicID, Spec: s.Spec, Detached: s.Detached,
		CreatedMs: s.CreatedAt.UnixMilli(), UpdatedMs: s.UpdatedAt.UnixMilli(),
		ExpirationTtlMs: s.ExpirationTTLMs, LastActiveMs: s.LastActive.UnixMilli(),
	}
}

// CreatePubSubTopic registers a topic after creating (or adopting: a native channel
// gcp.<id> keeps its records) its log. A schema_id that names no schema is NOT_FOUND
// (checked under the schema's lock, so a concurrent DeletePubSubSchema cannot leave
// the topic pointing at it).
func (r *Registry) CreatePubSubTopic(ctx context.Context, req *coordinatorv1.CreatePubSubTopicRequest) (*coordinatorv1.CreatePubSubTopicResponse, error) {
	id := req.GetTopic().GetId()
	if err := channel.ValidatePubSubTopicID(id); err != nil {
		return nil, statusError(invalid(err))
	}
	t := &store.PubSubTopic{ID: id, Spec: req.GetTopic().GetSpec(), SchemaID: req.GetTopic().GetSchemaId()}
	err := r.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockTopic(ctx, id); err != nil {
			return err
		}
		if _, err := tx.Topic(ctx, id); err == nil {
			return ErrTopicExists
		} else if !errors.Is(err, store.ErrTopicNotFound) {
			return err
		}
		if err := lockTopicSchema(ctx, tx, t.SchemaID); err != nil {
			return err
		}
		name := channel.PubSubTopic(id)
		resp, err := r.createLog(ctx, id, req.GetChannelConfig())
		if err != nil {
			return err
		}
		if !resp.GetCreated() && req.GetChannelConfig() != nil {
			if _, err := r.storage.UpdateChannelConfig(ctx, &storagev1.UpdateChannelConfigRequest{
				Name: name, Config: req.GetChannelConfig(), UpdateMask: []string{"retention_ms", "max_message_bytes"},
			}); err != nil {
				return storageError("configure channel "+name, err)
			}
		}
		return tx.InsertTopic(ctx, t)
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.CreatePubSubTopicResponse{Topic: topicProto(t)}, nil
}

// createLog creates the log gcp.<id> of topic id with cfg, or leaves the one that
// exists as it is (if_not_exists: created false).
func (r *Registry) createLog(ctx context.Context, id string, cfg *storagev1.ChannelConfig) (*storagev1.CreateChannelResponse, error) {
	name := channel.PubSubTopic(id)
	resp, err := r.storage.CreateChannel(ctx, &storagev1.CreateChannelRequest{
		Name: name, Kind: storagev1.ChannelKind_CHANNEL_KIND_LOG, Config: cfg, IfNotExists: true,
	})
	if err != nil {
		return nil, storageError("create channel "+name, err)
	}
	return resp, nil
}

// GetPubSubTopic returns a topic.
func (r *Registry) GetPubSubTopic(ctx context.Context, req *coordinatorv1.GetPubSubTopicRequest) (*coordinatorv1.GetPubSubTopicResponse, error) {
	t, err := r.store.PubSubTopic(ctx, req.GetId())
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.GetPubSubTopicResponse{Topic: topicProto(t)}, nil
}

// UpdatePubSubTopic replaces a topic's spec and schema, and the masked fields of its
// log's config. A schema_id that names no schema is NOT_FOUND.
func (r *Registry) UpdatePubSubTopic(ctx context.Context, req *coordinatorv1.UpdatePubSubTopicRequest) (*coordinatorv1.UpdatePubSubTopicResponse, error) {
	id := req.GetTopic().GetId()
	var out *store.PubSubTopic
	err := r.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockTopic(ctx, id); err != nil {
			return err
		}
		if _, err := tx.Topic(ctx, id); err != nil {
			return err
		}
		if err := lockTopicSchema(ctx, tx, req.GetTopic().GetSchemaId()); err != nil {
			return err
		}
		if len(req.GetChannelConfigMask()) > 0 {
			name := channel.PubSubTopic(id)
			if _, err := r.storage.UpdateChannelConfig(ctx, &storagev1.UpdateChannelConfigRequest{
				Name: name, Config: req.GetChannelConfig(), UpdateMask: req.GetChannelConfigMask(),
			}); err != nil {
				return storageError("configure channel "+name, err)
			}
		}
		if err := tx.UpdateTopicSpec(ctx, id, req.GetTopic().GetSpec(), req.GetTopic().GetSchemaId()); err != nil {
			return err
		}
		var err error
		out, err = tx.Topic(ctx, id)
		return err
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.UpdatePubSubTopicResponse{Topic: topicProto(out)}, nil
}

// ListPubSubTopics pages through topics by id.
func (r *Registry) ListPubSubTopics(ctx context.Context, req *coordinatorv1.ListPubSubTopicsRequest) (*coordinatorv1.ListPubSubTopicsResponse, error) {
	size, after, err := page(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, statusError(err)
	}
	ts, err := r.store.PubSubTopics(ctx, after, size+1)
	if err != nil {
		return nil, statusError(err)
	}
	resp := &coordinatorv1.ListPubSubTopicsResponse{}
	resp.Topics, resp.NextPageToken = pageOut(ts, size, func(t *store.PubSubTopic) string { return t.ID }, topicProto)
	return resp, nil
}

// DeletePubSubTopic unregisters a topic: it unbinds each of the topic's subscriptions
// from the topic's log, then deletes the log and the row, and clears the topic from the
// subscriptions (Pub/Sub's `_deleted-topic_`). The subscriptions keep what they already
// hold and never receive anything new, also not from a topic created again under the
// same id, whose log starts empty.
//
// Order under failure (README): unbind first, then delete the log, then commit the row
// change, all under the topic's lock. A failure stops the delete with the topic still
// registered (the row change rolls back) and the call's error; the subscriptions
// unbound so far stay unbound (Unbind is idempotent, so the client's retry finishes the
// delete). The log is deleted only once no subscription is bound to it, and the row
// only once the log is gone, so a re-created topic never feeds an old subscription and
// never adopts the old log's records.
func (r *Registry) DeletePubSubTopic(ctx context.Context, req *coordinatorv1.DeletePubSubTopicRequest) (*coordinatorv1.DeletePubSubTopicResponse, error) {
	id := req.GetId()
	err := r.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockTopic(ctx, id); err != nil {
			return err
		}
		if _, err := tx.Topic(ctx, id); err != nil {
			return err
		}
		name := channel.PubSubTopic(id)
		// No subscription of the topic can be created meanwhile: CreateSubscription
		// takes the topic's lock, which we hold.
		if err := r.unbindSubscriptions(ctx, id, name); err != nil {
			return err
		}
		if _, err := r.storage.DeleteChannel(ctx, &storagev1.DeleteChannelRequest{Name: name, IfExists: true}); err != nil {
			return storageError("delete channel "+name, err)
		}
		return tx.DeleteTopic(ctx, id)
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.DeletePubSubTopicResponse{}, nil
}

// unbindSubscriptions removes the binding to log of every subscription of topic. A
// subscription without a queue (NOT_FOUND) has nothing to unbind.
func (r *Registry) unbindSubscriptions(ctx context.Context, topic, log string) error {
	after := ""
	for {
		ss, err := r.store.PubSubSubscriptions(ctx, topic, after, maxPageSize)
		if err != nil {
			return err
		}
		for _, s := range ss {
			q := channel.PubSubSubscription(s.ID)
			if _, err := r.queues.Unbind(ctx, &storagev1.UnbindRequest{Queue: q, Source: log}); err != nil && status.Code(err) != codes.NotFound {
				return storageError("unbind queue "+q, err)
			}
		}
		if len(ss) < maxPageSize {
			return nil
		}
		after = ss[len(ss)-1].ID
	}
}

// CreatePubSubSubscription registers a subscription after creating its queue, bound to
// the topic's log. A queue left behind by an earlier failed delete is replaced.
func (r *Registry) CreatePubSubSubscription(ctx context.Context, req *coordinatorv1.CreatePubSubSubscriptionRequest) (*coordinatorv1.CreatePubSubSubscriptionResponse, error) {
	in := req.GetSubscription()
	id, topic := in.GetId(), in.GetTopicId()
	if err := channel.ValidatePubSubID(id); err != nil {
		return nil, statusError(invalid(err))
	}
	s := &store.PubSubSubscription{ID: id, TopicID: topic, Spec: in.GetSpec(), ExpirationTTLMs: max(in.GetExpirationTtlMs(), 0), LastActive: r.now()}
	err := r.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockSubscription(ctx, id); err != nil {
			return err
		}
		if _, err := tx.Subscription(ctx, id); err == nil {
			return ErrSubscriptionExists
		} else if !errors.Is(err, store.ErrSubscriptionNotFound) {
			return err
		}
		if err := tx.LockTopic(ctx, topic); err != nil {
			return err
		}
		if _, err := tx.Topic(ctx, topic); err != nil {
			return err
		}
		create := queueRequest(id, topic, req.GetFilter(), req.GetQueueConfig())
		name := create.GetName()
		_, err := r.queues.CreateQueue(ctx, create)
		if status.Code(err) == codes.AlreadyExists {
			// Not registered (we hold the id's lock and found no row): a leftover.
			if _, err := r.queues.DeleteQueue(ctx, &storagev1.DeleteQueueRequest{Name: name, IfExists: true}); err != nil {
				return storageError("delete leftover queue "+name, err)
			}
			_, err = r.queues.CreateQueue(ctx, create)
		}
		if err != nil {
			return storageError("create queue "+name, err)
		}
		if err := tx.InsertSubscription(ctx, s); err != nil {
			if _, derr := r.queues.DeleteQueue(context.WithoutCancel(ctx), &storagev1.DeleteQueueRequest{Name: name, IfExists: true}); derr != nil {
				r.log.Warn("could not remove the queue of a failed create", zap.String("queue", name), zap.Error(derr))
			}
			return err
		}
		return nil
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.CreatePubSubSubscriptionResponse{Subscription: subProto(s)}, nil
}

// queueRequest is the creation of the queue gcp.sub.<id> of subscription id with cfg,
// bound to the log of topic with filter (no binding when topic is empty: its topic was
// deleted).
func queueRequest(id, topic, filter string, cfg *storagev1.QueueConfig) *storagev1.CreateQueueRequest {
	req := &storagev1.CreateQueueRequest{Name: channel.PubSubSubscription(id), Config: cfg}
	if topic != "" {
		req.Bindings = []*storagev1.Binding{{Source: channel.PubSubTopic(topic), Filter: filter}}
	}
	return req
}

// GetPubSubSubscription returns a subscription.
func (r *Registry) GetPubSubSubscription(ctx context.Context, req *coordinatorv1.GetPubSubSubscriptionRequest) (*coordinatorv1.GetPubSubSubscriptionResponse, error) {
	s, err := r.store.PubSubSubscription(ctx, req.GetId())
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.GetPubSubSubscriptionResponse{Subscription: subProto(s)}, nil
}

// UpdatePubSubSubscription replaces a subscription's spec and the masked fields of its
// queue's config.
func (r *Registry) UpdatePubSubSubscription(ctx context.Context, req *coordinatorv1.UpdatePubSubSubscriptionRequest) (*coordinatorv1.UpdatePubSubSubscriptionResponse, error) {
	id := req.GetSubscription().GetId()
	var out *store.PubSubSubscription
	err := r.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockSubscription(ctx, id); err != nil {
			return err
		}
		if _, err := tx.Subscription(ctx, id); err != nil {
			return err
		}
		if len(req.GetQueueConfigMask()) > 0 {
			name := channel.PubSubSubscription(id)
			if _, err := r.queues.UpdateQueueConfig(ctx, &storagev1.UpdateQueueConfigRequest{
				Name: name, Config: req.GetQueueConfig(), UpdateMask: req.GetQueueConfigMask(),
			}); err != nil {
				return storageError("configure queue "+name, err)
			}
		}
		if err := tx.UpdateSubscriptionSpec(ctx, id, req.GetSubscription().GetSpec()); err != nil {
			return err
		}
		// An update restarts the expiration clock (Google: "if you update any of the
		// subscription properties, the subscription deletion clock restarts").
		if err := tx.SetSubscriptionExpiry(ctx, id, req.GetSubscription().GetExpirationTtlMs(), r.now()); err != nil {
			return err
		}
		var err error
		out, err = tx.Subscription(ctx, id)
		return err
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.UpdatePubSubSubscriptionResponse{Subscription: subProto(out)}, nil
}

// ListPubSubSubscriptions pages through subscriptions by id.
func (r *Registry) ListPubSubSubscriptions(ctx context.Context, req *coordinatorv1.ListPubSubSubscriptionsRequest) (*coordinatorv1.ListPubSubSubscriptionsResponse, error) {
	size, after, err := page(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, statusError(err)
	}
	if t := req.GetTopicId(); t != "" {
		if _, err := r.store.PubSubTopic(ctx, t); err != nil {
			return nil, statusError(err)
		}
	}
	ss, err := r.store.PubSubSubscriptions(ctx, req.GetTopicId(), after, size+1)
	if err != nil {
		return nil, statusError(err)
	}
	resp := &coordinatorv1.ListPubSubSubscriptionsResponse{}
	resp.Subscriptions, resp.NextPageToken = pageOut(ss, size, func(s *store.PubSubSubscription) string { return s.ID }, subProto)
	return resp, nil
}

// DeletePubSubSubscription deletes a subscription's queue, then its row.
func (r *Registry) DeletePubSubSubscription(ctx context.Context, req *coordinatorv1.DeletePubSubSubscriptionRequest) (*coordinatorv1.DeletePubSubSubscriptionResponse, error) {
	id := req.GetId()
	err := r.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockSubscription(ctx, id); err != nil {
			return err
		}
		if _, err := tx.Subscription(ctx, id); err != nil {
			return err
		}
		name := channel.PubSubSubscription(id)
		if _, err := r.queues.DeleteQueue(ctx, &storagev1.DeleteQueueRequest{Name: name, IfExists: true}); err != nil {
			return storageError("delete queue "+name, err)
		}
		return tx.DeleteSubscription(ctx, id)
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.DeletePubSubSubscriptionResponse{}, nil
}

// DetachPubSubSubscription detaches a subscription's queue and marks it detached.
func (r *Registry) DetachPubSubSubscription(ctx context.Context, req *coordinatorv1.DetachPubSubSubscriptionRequest) (*coordinatorv1.DetachPubSubSubscriptionResponse, error) {
	id := req.GetId()
	err := r.store.WithPubSubTx(ctx, func(tx *store.PubSubTx) error {
		if err := tx.LockSubscription(ctx, id); err != nil {
			return err
		}
		if _, err := tx.Subscription(ctx, id); err != nil {
			return err
		}
		name := channel.PubSubSubscription(id)
		if _, err := r.queues.Detach(ctx, &storagev1.DetachRequest{Name: name}); err != nil && status.Code(err) != codes.FailedPrecondition {
			return storageError("detach queue "+name, err)
		}
		return tx.SetSubscriptionDetached(ctx, id)
	})
	if err != nil {
		return nil, statusError(err)
	}
	return &coordinatorv1.DetachPubSubSubscriptionResponse{}, nil
}

func page(size int32, tok string) (int, string, error) {
	switch {
	case size < 0:
		return 0, "", fail(ErrInvalidArgument, "page size %d is negative", size)
	case size == 0:
		size = defaultPageSize
	case size > maxPageSize:
		size = maxPageSize
	}
	after, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, "", fail(ErrInvalidArgument, "invalid page token %q", tok)
	}
	return int(size), string(after), nil
}

func token(lastID string) string { return base64.RawURLEncoding.EncodeToString([]byte(lastID)) }

// pageOut turns rows read with a limit of size+1 into one page of answers and the token
// of the next page ("" when this is the last one).
func pageOut[R any, P any](rows []R, size int, id func(R) string, conv func(R) P) ([]P, string) {
	next := ""
	if len(rows) > size {
		rows = rows[:size]
		next = token(id(rows[size-1]))
	}
	out := make([]P, 0, len(rows))
	for _, r := range rows {
		out = append(out, conv(r))
	}
	return out, next
}
