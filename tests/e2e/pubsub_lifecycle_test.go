package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestPubSubDeleteTopicRecreate: with the Go client, publish, delete the topic, create
// it again and publish: the old subscription reads _deleted-topic_, still delivers what
// it had and gets nothing of the new topic; a new subscription of the new topic gets
// exactly the new messages; the new topic's log starts empty.
func TestPubSubDeleteTopicRecreate(t *testing.T) {
	s := pubsubStack(t)
	c := psClient(t, s.PubSubAddrs[0])
	ctx := ctxT(t, 2*time.Minute)
	topic, oldSub, newSub := psID("recr"), psID("recr-old"), psID("recr-new")
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topicPath(topic)}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: subPath(oldSub), Topic: topicPath(topic)}); err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	publish := func(prefix string) {
		p := c.Publisher(topic)
		var msgs []*pubsub.Message
		for i := range 5 {
			msgs = append(msgs, &pubsub.Message{Data: []byte(fmt.Sprintf("%s-%d", prefix, i))})
		}
		publishAll(t, p, msgs)
		p.Stop()
	}
	publish("before")
	_, q := storageClients(t, s.StorageAddr)
	waitBacklog(t, q, oldSub, 5, 10*time.Second) // copied into the queue before the delete

	if err := c.TopicAdminClient.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: topicPath(topic)}); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	gs, err := c.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: subPath(oldSub)})
	if err != nil || gs.GetTopic() != "_deleted-topic_" {
		t.Fatalf("old subscription after DeleteTopic = %v, %v", gs, err)
	}
	if qr, err := q.GetQueue(ctx, &storagev1.GetQueueRequest{Name: channel.PubSubSubscription(oldSub)}); err != nil || len(qr.GetQueue().GetBindings()) != 0 {
		t.Fatalf("old subscription's queue after DeleteTopic: %v, %v", qr, err)
	}

	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topicPath(topic)}); err != nil {
		t.Fatalf("CreateTopic again: %v", err)
	}
	store, _ := storageClients(t, s.StorageAddr)
	if rd, err := store.Read(ctx, &storagev1.ReadRequest{Channel: channel.PubSubTopic(topic), FromSequence: 1, MaxRecords: 10}); err != nil || len(rd.GetRecords()) != 0 {
		t.Fatalf("log of the re-created topic = %v, %v; want empty", rd, err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: subPath(newSub), Topic: topicPath(topic)}); err != nil {
		t.Fatalf("CreateSubscription on the new topic: %v", err)
	}
	publish("after")

	receive := func(sub string, want int) []string {
		var mu sync.Mutex
		var got []string
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second) // long enough for anything stray to arrive
		defer cancel()
		if err := c.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			m.Ack()
			mu.Lock()
			got = append(got, string(m.Data))
			mu.Unlock()
		}); err != nil {
			t.Fatalf("Receive %s: %v", sub, err)
		}
		sort.Strings(got)
		if len(got) != want {
			t.Errorf("%s received %v, want %d messages", sub, got, want)
		}
		return got
	}
	for _, d := range receive(oldSub, 5) {
		if !strings.HasPrefix(d, "before-") {
			t.Errorf("old subscription received %q from the re-created topic", d)
		}
	}
	for _, d := range receive(newSub, 5) {
		if !strings.HasPrefix(d, "after-") {
			t.Errorf("new subscription received %q", d)
		}
	}
	ls, err := c.TopicAdminClient.ListTopicSubscriptions(ctx, &pubsubpb.ListTopicSubscriptionsRequest{Topic: topicPath(topic)}).Next()
	if err != nil || ls != subPath(newSub) {
		t.Errorf("ListTopicSubscriptions of the new topic: first %q, %v", ls, err)
	}
}
