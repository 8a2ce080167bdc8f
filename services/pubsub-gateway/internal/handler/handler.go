// Package handler implements the google.pubsub.v1 Publisher, Subscriber and
// SchemaService services and google.iam.v1.IAMPolicy (emulator mode: no auth) over
// Tributary: the registry of topics, subscriptions and schemas lives in the coordinator
// (PubSubRegistryService, PubSubSchemaService), messages
// in storage-core (a topic is the log gcp.<t>, a subscription the queue gcp.sub.<s>
// bound to it; QueueService holds every lease, so any replica can ack, modack or
// redeliver any message).
//
// One type per role, around a shared registry cache (registry.go):
//   - Publisher (publisher.go, publish.go, schema_topic.go): topics, Publish, and the
//     schema settings of topics;
//   - Subscriber (subscriber.go, settings.go, pull.go, ackbatch.go, streaming.go,
//     streamwire.go, receivewire.go, hold.go, push.go, snapshots.go, activity.go,
//     wake.go): subscriptions, Pull, StreamingPull, acks, push, snapshots and Seek,
//     and the wake-ups of streams;
//   - Schemas (schema.go, schema_codec.go): SchemaService.
//
// None keeps state beyond short-lived caches and, for the Subscriber, the flow-control
// books of its own StreamingPull streams, which learn of leases ended through other
// replicas from NATS wake-ups (wake.go). ../../LOCKS.md lists the locks.
package handler

import (
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Deps are the backends of the services.
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

// Services are the gateway's three Pub/Sub services, built by New around one registry
// cache, so a change through one (a schema deleted, a topic updated) is seen at once
// by the others on this replica.
type Services struct {
	Publisher  *Publisher
	Subscriber *Subscriber
	Schemas    *Schemas
}

// New returns the services over d.
func New(d Deps) *Services {
	r := newRegistry(d)
	return &Services{
		Publisher:  newPublisher(r, d),
		Subscriber: newSubscriber(r, d),
		Schemas:    &Schemas{registry: r},
	}
}
