package server

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tributary/tributary/libs/pubsubspec"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestPubSubReconcileRecreatesLostChannels: with the registry kept and storage-core's
// Pub/Sub channels lost, a starting coordinator (two replicas at once) re-creates each
// topic's log with its retention and each subscription's queue with the binding, filter
// and settings it was created and updated with; a detached subscription gets no queue,
// one whose topic was deleted a queue without binding.
func TestPubSubReconcileRecreatesLostChannels(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	c := registryClient(t, r)
	ctx := ctxT(t)

	mkTopic := func(id string, retention time.Duration) {
		t.Helper()
		spec := &pubsubpb.Topic{Name: "projects/my-project/topics/" + id, MessageRetentionDuration: durationpb.New(retention)}
		b, _ := proto.Marshal(spec)
		if _, err := c.CreatePubSubTopic(ctx, &coordinatorv1.CreatePubSubTopicRequest{
			Topic: &coordinatorv1.PubSubTopic{Id: id, Spec: b}, ChannelConfig: pubsubspec.TopicChannelConfig(spec),
		}); err != nil {
			t.Fatal(err)
		}
	}
	mkTopic("orders", time.Hour)
	mkTopic("dead", 2*time.Hour)
	mkTopic("gone", time.Hour)
	want := map[string]*storagev1.CreateQueueRequest{}
	mkSub := func(id, topic string, s *pubsubpb.Subscription) {
		t.Helper()
		s.Name, s.Topic = "projects/my-project/subscriptions/"+id, "projects/my-project/topics/"+topic
		b, _ := proto.Marshal(s)
		req := &coordinatorv1.CreatePubSubSubscriptionRequest{
			Subscription: &coordinatorv1.PubSubSubscription{Id: id, TopicId: topic, Spec: b},
			QueueConfig:  pubsubspec.QueueConfig(s, "my-project", id), Filter: s.GetFilter(),
		}
		if _, err := c.CreatePubSubSubscription(ctx, req); err != nil {
			t.Fatal(err)
		}
		want[id] = proto.Clone(e.storage.queues.get("gcp.sub." + id)).(*storagev1.CreateQueueRequest)
	}
	billing := &pubsubpb.Subscription{
		AckDeadlineSeconds: 30, MessageRetentionDuration: durationpb.New(3 * time.Hour), RetainAckedMessages: true,
		Filter: `attributes.kind = "paid"`, EnableMessageOrdering: true, EnableExactlyOnceDelivery: true,
		DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: "projects/my-project/topics/dead", MaxDeliveryAttempts: 7},
		RetryPolicy:      &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(time.Second), MaximumBackoff: durationpb.New(time.Minute)},
	}
	mkSub("billing", "orders", billing)
	mkSub("plain", "orders", &pubsubpb.Subscription{AckDeadlineSeconds: 10, MessageRetentionDuration: durationpb.New(time.Hour)})
	mkSub("detached", "orders", &pubsubpb.Subscription{AckDeadlineSeconds: 10})
	mkSub("orphan", "gone", &pubsubpb.Subscription{AckDeadlineSeconds: 10})
	if _, err := c.DetachPubSubSubscription(ctx, &coordinatorv1.DetachPubSubSubscriptionRequest{Id: "detached"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeletePubSubTopic(ctx, &coordinatorv1.DeletePubSubTopicRequest{Id: "gone"}); err != nil {
		t.Fatal(err)
	}
	// An update changes the ack deadline: the stored spec and the queue agree on it.
	billing.AckDeadlineSeconds = 60
	b, _ := proto.Marshal(billing)
	if _, err := c.UpdatePubSubSubscription(ctx, &coordinatorv1.UpdatePubSubSubscriptionRequest{
		Subscription: &coordinatorv1.PubSubSubscription{Id: "billing", Spec: b},
		QueueConfig:  pubsubspec.QueueConfig(billing, "my-project", "billing"), QueueConfigMask: []string{"ack_deadline_ms"},
	}); err != nil {
		t.Fatal(err)
	}
	want["billing"].Config = proto.Clone(e.storage.queues.get("gcp.sub.billing").GetConfig()).(*storagev1.QueueConfig)
	want["orphan"].Bindings = nil
	r.stop()

	for _, n := range e.storage.names() {
		if strings.HasPrefix(n, "gcp.") {
			e.storage.drop(n)
		}
	}
	for _, n := range e.storage.queues.names() {
		e.storage.queues.drop(n)
	}
	e.storage.queues.mu.Lock()
	e.storage.queues.created = 0
	e.storage.queues.mu.Unlock()
	// Two replicas reconcile at once: each channel is created once, neither fails.
	start(t, e.cfg, true)
	start(t, e.cfg, true)
	waitFor(t, "lost Pub/Sub channels re-created", func() error {
		if got := e.storage.names(); !slices.Equal(got, []string{"gcp.dead", "gcp.orders"}) {
			return fmt.Errorf("logs %v", got)
		}
		if got := e.storage.queues.names(); !slices.Equal(got, []string{"gcp.sub.billing", "gcp.sub.orphan", "gcp.sub.plain"}) {
			return fmt.Errorf("queues %v", got)
		}
		return nil
	})
	if got := e.storage.config("gcp.orders"); got.GetRetentionMs() != time.Hour.Milliseconds() || got.GetMaxMessageBytes() != pubsubspec.MaxLogBatchBytes {
		t.Fatalf("log gcp.orders: %v", got)
	}
	if got := e.storage.config("gcp.dead"); got.GetRetentionMs() != 2*time.Hour.Milliseconds() {
		t.Fatalf("log gcp.dead: %v", got)
	}
	for _, id := range []string{"billing", "plain", "orphan"} {
		got := e.storage.queues.get("gcp.sub." + id)
		w := want[id]
		w.IfNotExists = true
		if !proto.Equal(got, w) {
			t.Errorf("queue gcp.sub.%s:\n got %v\nwant %v", id, got, w)
		}
	}
	if got := e.storage.queues.get("gcp.sub.billing"); got.GetConfig().GetAckDeadlineMs() != 60000 || got.GetBindings()[0].GetFilter() != `attributes.kind = "paid"` {
		t.Fatalf("queue gcp.sub.billing: %v", got)
	}
	e.storage.queues.mu.Lock()
	n := e.storage.queues.created
	e.storage.queues.mu.Unlock()
	if n != 3 {
		t.Fatalf("%d queues created, want 3", n)
	}
}
