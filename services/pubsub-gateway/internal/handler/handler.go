// Package handler implements the google.pubsub.v1 Publisher, Subscriber and
// SchemaService services and google.iam.v1.IAMPolicy (emulator mode: no auth) over
// Tributary: the registry of topics, subscriptions and schemas lives in the coordinator
// (PubSubRegistryService, PubSubSchemaService), messages
// in storage-core (a topic is the log gcp.<t>, a subscription the queue gcp.sub.<s>
// bound to it; QueueService holds every lease, so any replica can ack, modack or
// redeliver any message). The handler itself keeps no state beyond short-lived caches
// and the flow-control books of its own StreamingPull streams, which learn of leases
// ended through other replicas from NATS wake-ups (wake.go).
package handler

import (
	"context"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// cacheTTL bounds how stale a cached topic or subscription may be when Publish and the
// delivery RPCs look it up (admin RPCs always ask the coordinator).
const cacheTTL = 2 * time.Second

// Deps are the backends of a Handler.
type Deps struct {
	Registry coordinatorv1.PubSubRegistryServiceClient
	Schemas  coordinatorv1.PubSubSchemaServiceClient
	Storage  storagev1.StorageServiceClient
	Queues   storagev1.QueueServiceClient
	// StorageConn is the connection Queues uses; with it, Receive answers are decoded
	// straight from the wire (receivewire.go). It needs grpcx's codec on the
	// connection (grpcx.Dial). nil: through Queues.
	StorageConn grpc.ClientConnInterface
	// EncodeStreams makes StreamingPull streams encode their message batches themselves
	// (streamwire.go) and send them through the server's codec as
	// grpcx.BufferMarshaler: set it only when the server runs grpcx's codec
	// (grpcx.NewServer). false: streams send proto messages.
	EncodeStreams bool
	Log           *zap.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Announce carries lease wake-ups to and from the other replicas (NATS; wake.go);
	// nil without NATS.
	Announce Announcer
	// StreamBufferBytes bounds the message bytes this replica's StreamingPull streams
	// hold waiting for slow clients (hold.go); 0 = DefaultStreamBufferBytes.
	StreamBufferBytes int64
}

// Handler serves Publisher, Subscriber and SchemaService.
type Handler struct {
	pubsubpb.UnimplementedPublisherServer
	pubsubpb.UnimplementedSubscriberServer
	pubsubpb.UnimplementedSchemaServiceServer

	reg     coordinatorv1.PubSubRegistryServiceClient
	schemas coordinatorv1.PubSubSchemaServiceClient
	store   storagev1.StorageServiceClient
	queues  storagev1.QueueServiceClient
	// storageConn: see Deps.StorageConn.
	storageConn grpc.ClientConnInterface
	// encodeStreams: see Deps.EncodeStreams.
	encodeStreams bool
	log           *zap.Logger
	now           func() time.Time

	mu     sync.Mutex
	topics map[string]cachedTopic
	subs   map[string]cachedSub
	// ranges caches the compiled revisions of topics' schema settings (schema_topic.go).
	ranges *rangeCache

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

// cachedTopic is what Publish needs to know about a topic.
type cachedTopic struct {
	at time.Time
	// schema is the topic's schema settings (nil = none); schemaDeleted is set when
	// that schema was deleted since.
	schema        *pubsubpb.SchemaSettings
	schemaDeleted bool
}

type cachedSub struct {
	sub *subInfo
	at  time.Time
}

// subInfo is what delivery needs to know about a subscription.
type subInfo struct {
	id       string
	spec     *pubsubpb.Subscription
	detached bool
}

// New returns a Handler over d.
func New(d Deps) *Handler {
	now := d.Now
	if now == nil {
		now = time.Now
	}
	limit := d.StreamBufferBytes
	if limit <= 0 {
		limit = DefaultStreamBufferBytes
	}
	h := &Handler{
		reg: d.Registry, schemas: d.Schemas, store: d.Storage, queues: d.Queues, storageConn: d.StorageConn, encodeStreams: d.EncodeStreams, log: d.Log, now: now,
		topics:    map[string]cachedTopic{},
		subs:      map[string]cachedSub{},
		ranges:    newRangeCache(),
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

// topicExists reports whether topic id is registered, from the cache when fresh.
func (h *Handler) topicExists(ctx context.Context, id string) error {
	_, err := h.topic(ctx, id)
	return err
}

// topic returns topic id's publish settings, from the cache when fresh.
func (h *Handler) topic(ctx context.Context, id string) (cachedTopic, error) {
	h.mu.Lock()
	c, ok := h.topics[id]
	h.mu.Unlock()
	if ok && h.now().Sub(c.at) < cacheTTL {
		return c, nil
	}
	resp, err := h.reg.GetPubSubTopic(ctx, &coordinatorv1.GetPubSubTopicRequest{Id: id})
	if err != nil {
		return cachedTopic{}, backendError(ctx, err, msgTopicNotFound)
	}
	spec := &pubsubpb.Topic{}
	if err := proto.Unmarshal(resp.GetTopic().GetSpec(), spec); err != nil {
		return cachedTopic{}, backendError(ctx, err, "")
	}
	c = cachedTopic{at: h.now(), schema: spec.GetSchemaSettings()}
	c.schemaDeleted = c.schema != nil && resp.GetTopic().GetSchemaId() == ""
	h.mu.Lock()
	h.topics[id] = c
	h.mu.Unlock()
	return c, nil
}

// subscription returns subscription id, from the cache when fresh.
func (h *Handler) subscription(ctx context.Context, id string) (*subInfo, error) {
	h.mu.Lock()
	c, ok := h.subs[id]
	h.mu.Unlock()
	if ok && h.now().Sub(c.at) < cacheTTL {
		return c.sub, nil
	}
	resp, err := h.reg.GetPubSubSubscription(ctx, &coordinatorv1.GetPubSubSubscriptionRequest{Id: id})
	if err != nil {
		return nil, backendError(ctx, err, msgSubNotFound)
	}
	info, err := decodeSub(resp.GetSubscription())
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.subs[id] = cachedSub{sub: info, at: h.now()}
	h.mu.Unlock()
	return info, nil
}

// forget drops cached entries after a change through this replica.
func (h *Handler) forget(topic, sub string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if topic != "" {
		delete(h.topics, topic)
	}
	if sub != "" {
		delete(h.subs, sub)
	}
}

func decodeSub(s *coordinatorv1.PubSubSubscription) (*subInfo, error) {
	spec := &pubsubpb.Subscription{}
	if err := proto.Unmarshal(s.GetSpec(), spec); err != nil {
		return nil, backendError(context.Background(), err, "")
	}
	if s.GetTopicId() == "" {
		spec.Topic = deletedTopic
	}
	spec.Detached = s.GetDetached()
	return &subInfo{id: s.GetId(), spec: spec, detached: s.GetDetached()}, nil
}
