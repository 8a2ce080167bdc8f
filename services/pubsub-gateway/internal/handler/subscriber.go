package handler

import (
	"context"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Subscriber serves google.pubsub.v1.Subscriber: subscriptions, Pull and
// StreamingPull, acks and deadline changes, snapshots and Seek; it also feeds the
// Pusher, reports subscriptions' activity, and wakes its streams when leases end
// elsewhere (Wake).
type Subscriber struct {
	pubsubpb.UnimplementedSubscriberServer
	*registry

	queues storagev1.QueueServiceClient
	// storageConn: see Deps.StorageConn.
	storageConn grpc.ClientConnInterface
	// encodeStreams: see Deps.EncodeStreams.
	encodeStreams bool

	streams   *streamBook
	act       *activity
	listeners *listeners
	announce  Announcer
	budget    *holdBudget
	// acks and modacks coalesce the storage calls of concurrent acks and deadline
	// changes (ackbatch.go).
	acks    *coalescer[string]
	modacks *coalescer[modAckKey]
}

func newSubscriber(r *registry, d Deps) *Subscriber {
	limit := d.StreamBufferBytes
	if limit <= 0 {
		limit = DefaultStreamBufferBytes
	}
	h := &Subscriber{
		registry: r, queues: d.Queues, storageConn: d.StorageConn, encodeStreams: d.EncodeStreams,
		streams:   newStreamBook(),
		act:       newActivity(),
		listeners: newListeners(),
		announce:  d.Announce,
		budget:    &holdBudget{limit: limit},
	}
	h.acks = newCoalescer(h.storageAck)
	h.modacks = newCoalescer(h.storageModAck)
	return h
}

// CreateSubscription registers a subscription and its queue gcp.sub.<id>, bound to the
// topic's log with the filter. NOT_FOUND when the topic (or dead-letter topic) is
// missing.
func (h *Subscriber) CreateSubscription(ctx context.Context, s *pubsubpb.Subscription) (*pubsubpb.Subscription, error) {
	sub, err := parseName(s.GetName(), collSubscriptions)
	if err != nil {
		return nil, err
	}
	topic, err := parseName(s.GetTopic(), collTopics)
	if err != nil {
		return nil, err
	}
	spec := proto.Clone(s).(*pubsubpb.Subscription)
	spec.Detached = false
	if err := normalizeSub(spec, sub); err != nil {
		return nil, err
	}
	spec.Topic = topic.name(collTopics)
	if err := h.checkDeadLetterTopic(ctx, spec); err != nil {
		return nil, err
	}
	b, _ := proto.Marshal(spec)
	if _, err := h.reg.CreatePubSubSubscription(ctx, &coordinatorv1.CreatePubSubSubscriptionRequest{
		Subscription: &coordinatorv1.PubSubSubscription{Id: sub.id, TopicId: topic.id, Spec: b, ExpirationTtlMs: expirationTTLMs(spec)},
		QueueConfig:  queueConfig(spec, sub),
		Filter:       spec.GetFilter(),
	}); err != nil {
		return nil, backendError(ctx, err, "Subscription topic does not exist")
	}
	h.forget("", sub.id)
	return spec, nil
}

func (h *Subscriber) getSub(ctx context.Context, name string) (resource, *pubsubpb.Subscription, error) {
	r, err := parseName(name, collSubscriptions)
	if err != nil {
		return r, nil, err
	}
	resp, err := h.reg.GetPubSubSubscription(ctx, &coordinatorv1.GetPubSubSubscriptionRequest{Id: r.id})
	if err != nil {
		return r, nil, backendError(ctx, err, msgSubNotFound)
	}
	info, err := decodeSub(resp.GetSubscription())
	if err != nil {
		return r, nil, err
	}
	info.spec.Name = r.name(collSubscriptions)
	return r, info.spec, nil
}

// GetSubscription returns a subscription.
func (h *Subscriber) GetSubscription(ctx context.Context, req *pubsubpb.GetSubscriptionRequest) (*pubsubpb.Subscription, error) {
	_, s, err := h.getSub(ctx, req.GetSubscription())
	return s, err
}

// UpdateSubscription changes the fields named in update_mask. filter, topic and
// enable_message_ordering are immutable (INVALID_ARGUMENT).
func (h *Subscriber) UpdateSubscription(ctx context.Context, req *pubsubpb.UpdateSubscriptionRequest) (*pubsubpb.Subscription, error) {
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, invalid("The update_mask in the UpdateSubscriptionRequest must be set, and must be non-empty.")
	}
	for _, p := range paths {
		if subImmutable[p] {
			return nil, invalid("Invalid update_mask provided in the UpdateSubscriptionRequest: the '%s' field is immutable.", p)
		}
		if !subUpdatable[p] {
			return nil, invalid("Invalid update_mask provided in the UpdateSubscriptionRequest: the '%s' field cannot be updated.", p)
		}
	}
	if req.GetSubscription() == nil {
		return nil, invalid("The subscription in the UpdateSubscriptionRequest must be set.")
	}
	r, cur, err := h.getSub(ctx, req.GetSubscription().GetName())
	if err != nil {
		return nil, err
	}
	in := req.GetSubscription()
	var mask []string
	for _, p := range paths {
		switch p {
		case "ack_deadline_seconds":
			cur.AckDeadlineSeconds = in.GetAckDeadlineSeconds()
			mask = append(mask, "ack_deadline_ms")
		case "push_config":
			cur.PushConfig = in.GetPushConfig()
		case "message_retention_duration":
			cur.MessageRetentionDuration = in.GetMessageRetentionDuration()
			mask = append(mask, "message_retention_ms")
		case "retain_acked_messages":
			cur.RetainAckedMessages = in.GetRetainAckedMessages()
			mask = append(mask, "retain_acked")
		case "labels":
			cur.Labels = in.GetLabels()
		case "expiration_policy":
			cur.ExpirationPolicy = in.GetExpirationPolicy()
		case "dead_letter_policy":
			cur.DeadLetterPolicy = in.GetDeadLetterPolicy()
			mask = append(mask, "dead_letter")
		case "retry_policy":
			cur.RetryPolicy = in.GetRetryPolicy()
			mask = append(mask, "retry")
		case "enable_exactly_once_delivery":
			cur.EnableExactlyOnceDelivery = in.GetEnableExactlyOnceDelivery()
			mask = append(mask, "exactly_once")
		case "bigquery_config":
			cur.BigqueryConfig = in.GetBigqueryConfig()
		case "cloud_storage_config":
			cur.CloudStorageConfig = in.GetCloudStorageConfig()
		case "message_transforms":
			cur.MessageTransforms = in.GetMessageTransforms()
		}
	}
	topic, detached := cur.GetTopic(), cur.GetDetached()
	if err := normalizeSub(cur, r); err != nil {
		return nil, err
	}
	if err := h.checkDeadLetterTopic(ctx, cur); err != nil {
		return nil, err
	}
	cur.Topic, cur.Detached = topic, detached
	stored := proto.Clone(cur).(*pubsubpb.Subscription)
	stored.Detached = false
	b, _ := proto.Marshal(stored)
	if _, err := h.reg.UpdatePubSubSubscription(ctx, &coordinatorv1.UpdatePubSubSubscriptionRequest{
		Subscription: &coordinatorv1.PubSubSubscription{Id: r.id, Spec: b, ExpirationTtlMs: expirationTTLMs(cur)},
		QueueConfig:  queueConfig(cur, r), QueueConfigMask: mask,
	}); err != nil {
		return nil, backendError(ctx, err, msgSubNotFound)
	}
	h.forget("", r.id)
	return cur, nil
}

// ListSubscriptions pages through every subscription (ids are global).
func (h *Subscriber) ListSubscriptions(ctx context.Context, req *pubsubpb.ListSubscriptionsRequest) (*pubsubpb.ListSubscriptionsResponse, error) {
	project, err := parseProject(req.GetProject())
	if err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 {
		return nil, invalid("page_size must not be negative")
	}
	resp, err := h.reg.ListPubSubSubscriptions(ctx, &coordinatorv1.ListPubSubSubscriptionsRequest{PageSize: req.GetPageSize(), PageToken: req.GetPageToken()})
	if err != nil {
		return nil, backendError(ctx, err, "")
	}
	out := &pubsubpb.ListSubscriptionsResponse{NextPageToken: resp.GetNextPageToken()}
	for _, s := range resp.GetSubscriptions() {
		info, err := decodeSub(s)
		if err != nil {
			return nil, err
		}
		info.spec.Name = resource{project: project, id: s.GetId()}.name(collSubscriptions)
		out.Subscriptions = append(out.Subscriptions, info.spec)
	}
	return out, nil
}

// DeleteSubscription unregisters a subscription and deletes its queue.
func (h *Subscriber) DeleteSubscription(ctx context.Context, req *pubsubpb.DeleteSubscriptionRequest) (*emptypb.Empty, error) {
	r, err := parseName(req.GetSubscription(), collSubscriptions)
	if err != nil {
		return nil, err
	}
	if _, err := h.reg.DeletePubSubSubscription(ctx, &coordinatorv1.DeletePubSubSubscriptionRequest{Id: r.id}); err != nil {
		return nil, backendError(ctx, err, msgSubNotFound)
	}
	h.forget("", r.id)
	return &emptypb.Empty{}, nil
}

// ModifyPushConfig replaces a subscription's push config (an empty one makes it a pull
// subscription).
func (h *Subscriber) ModifyPushConfig(ctx context.Context, req *pubsubpb.ModifyPushConfigRequest) (*emptypb.Empty, error) {
	r, cur, err := h.getSub(ctx, req.GetSubscription())
	if err != nil {
		return nil, err
	}
	cur.PushConfig = req.GetPushConfig()
	topic := cur.GetTopic()
	if err := normalizeSub(cur, r); err != nil {
		return nil, err
	}
	cur.Topic, cur.Detached = topic, false
	b, _ := proto.Marshal(cur)
	if _, err := h.reg.UpdatePubSubSubscription(ctx, &coordinatorv1.UpdatePubSubSubscriptionRequest{
		Subscription: &coordinatorv1.PubSubSubscription{Id: r.id, Spec: b, ExpirationTtlMs: expirationTTLMs(cur)},
	}); err != nil {
		return nil, backendError(ctx, err, msgSubNotFound)
	}
	h.forget("", r.id)
	return &emptypb.Empty{}, nil
}
