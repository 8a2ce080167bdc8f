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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
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

// TestPubSubExpirationPolicy: with the Go client, the expiration policy's bounds
// (ttl under 1 day is INVALID_ARGUMENT; the default is 31 days; an explicit policy
// without ttl never expires) reach the registry, and subscriber activity (a Pull
// through either gateway, an ack) is reported to the coordinator within seconds, so
// its expiration clock restarts. The sweep itself is tested with a moved clock in the
// coordinator (internal/server TestPubSubExpiry).
func TestPubSubExpirationPolicy(t *testing.T) {
	s := pubsubStack(t)
	c := psClient(t, s.PubSubAddrs[0])
	ctx := ctxT(t, 2*time.Minute)
	topic, sub, never := psID("exp"), psID("exp-sub"), psID("exp-never")
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topicPath(topic)}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	_, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: subPath(psID("exp-bad")), Topic: topicPath(topic),
		ExpirationPolicy: &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(23 * time.Hour)}})
	wantCode(t, "CreateSubscription ttl 23h", err, codes.InvalidArgument)
	got, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: subPath(sub), Topic: topicPath(topic)})
	if err != nil || got.GetExpirationPolicy().GetTtl().AsDuration() != 31*24*time.Hour {
		t.Fatalf("CreateSubscription default expiration = %v, %v", got.GetExpirationPolicy(), err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: subPath(never), Topic: topicPath(topic),
		ExpirationPolicy: &pubsubpb.ExpirationPolicy{}}); err != nil {
		t.Fatalf("CreateSubscription never expiring: %v", err)
	}
	_, err = c.SubscriptionAdminClient.UpdateSubscription(ctx, &pubsubpb.UpdateSubscriptionRequest{
		Subscription: &pubsubpb.Subscription{Name: subPath(sub), ExpirationPolicy: &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(time.Hour)}},
		UpdateMask:   &fieldmaskpb.FieldMask{Paths: []string{"expiration_policy"}},
	})
	wantCode(t, "UpdateSubscription ttl 1h", err, codes.InvalidArgument)

	cc, err := grpc.NewClient(s.CoordinatorAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	reg := coordinatorv1.NewPubSubRegistryServiceClient(cc)
	registered := func(id string) *coordinatorv1.PubSubSubscription {
		t.Helper()
		r, err := reg.GetPubSubSubscription(ctx, &coordinatorv1.GetPubSubSubscriptionRequest{Id: id})
		if err != nil {
			t.Fatalf("registry GetPubSubSubscription %s: %v", id, err)
		}
		return r.GetSubscription()
	}
	if r := registered(sub); r.GetExpirationTtlMs() != (31 * 24 * time.Hour).Milliseconds() {
		t.Fatalf("registered ttl %d ms, want 31 days", r.GetExpirationTtlMs())
	}
	if r := registered(never); r.GetExpirationTtlMs() != 0 {
		t.Fatalf("registered ttl of a never expiring subscription: %d ms", r.GetExpirationTtlMs())
	}

	before := registered(sub).GetLastActiveMs()
	_, sc := rawPubSub(t, s.PubSubAddrs[1])
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second) // an empty Pull answers before its deadline
	defer cancel()
	if _, err := sc.Pull(pctx, &pubsubpb.PullRequest{Subscription: subPath(sub), MaxMessages: 1}); err != nil {
		t.Fatalf("Pull: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); registered(sub).GetLastActiveMs() <= before; {
		if time.Now().After(deadline) {
			t.Fatal("Pull not reported as activity within 20 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
