package server

import (
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func registryClient(t *testing.T, r *running) coordinatorv1.PubSubRegistryServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(r.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return coordinatorv1.NewPubSubRegistryServiceClient(cc)
}

// TestPubSubRegistry: topics and subscriptions with their channels: a topic's log and a
// subscription's queue exist before the rows; codes for duplicates, missing topics and
// bad ids; a deleted topic leaves its subscriptions without topic; a leftover queue is
// replaced on create.
func TestPubSubRegistry(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	c := registryClient(t, r)
	ctx := ctxT(t)

	_, err := c.CreatePubSubTopic(ctx, &coordinatorv1.CreatePubSubTopicRequest{Topic: &coordinatorv1.PubSubTopic{Id: "sub.bad", Spec: []byte("x")}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("topic sub.bad: %v", err)
	}
	if _, err := c.CreatePubSubTopic(ctx, &coordinatorv1.CreatePubSubTopicRequest{
		Topic: &coordinatorv1.PubSubTopic{Id: "orders", Spec: []byte("spec-1")}, ChannelConfig: &storagev1.ChannelConfig{RetentionMs: 3600000},
	}); err != nil {
		t.Fatal(err)
	}
	if cfg := e.storage.config("gcp.orders"); cfg == nil || cfg.GetRetentionMs() != 3600000 {
		t.Fatalf("log gcp.orders: %v", cfg)
	}
	_, err = c.CreatePubSubTopic(ctx, &coordinatorv1.CreatePubSubTopicRequest{Topic: &coordinatorv1.PubSubTopic{Id: "orders"}})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("duplicate topic: %v", err)
	}
	_, err = c.CreatePubSubSubscription(ctx, &coordinatorv1.CreatePubSubSubscriptionRequest{Subscription: &coordinatorv1.PubSubSubscription{Id: "billing", TopicId: "missing"}})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("subscription on a missing topic: %v", err)
	}
	// A queue without a row (left by a failed delete) is replaced.
	if _, err := e.storage.queues.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.billing"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreatePubSubSubscription(ctx, &coordinatorv1.CreatePubSubSubscriptionRequest{
		Subscription: &coordinatorv1.PubSubSubscription{Id: "billing", TopicId: "orders", Spec: []byte("sub-spec")},
		QueueConfig:  &storagev1.QueueConfig{AckDeadlineMs: 20000}, Filter: `attributes:x`,
	}); err != nil {
		t.Fatal(err)
	}
	q := e.storage.queues.get("gcp.sub.billing")
	if q == nil || q.GetConfig().GetAckDeadlineMs() != 20000 || len(q.GetBindings()) != 1 ||
		q.GetBindings()[0].GetSource() != "gcp.orders" || q.GetBindings()[0].GetFilter() != "attributes:x" {
		t.Fatalf("queue gcp.sub.billing: %v", q)
	}
	_, err = c.CreatePubSubSubscription(ctx, &coordinatorv1.CreatePubSubSubscriptionRequest{Subscription: &coordinatorv1.PubSubSubscription{Id: "billing", TopicId: "orders"}})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("duplicate subscription: %v", err)
	}
	up, err := c.UpdatePubSubSubscription(ctx, &coordinatorv1.UpdatePubSubSubscriptionRequest{
		Subscription: &coordinatorv1.PubSubSubscription{Id: "billing", Spec: []byte("sub-spec-2")},
		QueueConfig:  &storagev1.QueueConfig{AckDeadlineMs: 30000}, QueueConfigMask: []string{"ack_deadline_ms"},
	})
	if err != nil || string(up.GetSubscription().GetSpec()) != "sub-spec-2" || up.GetSubscription().GetTopicId() != "orders" ||
		e.storage.queues.get("gcp.sub.billing").GetConfig().GetAckDeadlineMs() != 30000 {
		t.Fatalf("update subscription: %v, %v", up, err)
	}

	// Paging over three topics, pages of two.
	for _, id := range []string{"alpha", "zulu"} {
		if _, err := c.CreatePubSubTopic(ctx, &coordinatorv1.CreatePubSubTopicRequest{Topic: &coordinatorv1.PubSubTopic{Id: id}}); err != nil {
			t.Fatal(err)
		}
	}
	p1, err := c.ListPubSubTopics(ctx, &coordinatorv1.ListPubSubTopicsRequest{PageSize: 2})
	if err != nil || len(p1.GetTopics()) != 2 || p1.GetNextPageToken() == "" || p1.GetTopics()[0].GetId() != "alpha" {
		t.Fatalf("page 1: %v, %v", p1, err)
	}
	p2, err := c.ListPubSubTopics(ctx, &coordinatorv1.ListPubSubTopicsRequest{PageSize: 2, PageToken: p1.GetNextPageToken()})
	if err != nil || len(p2.GetTopics()) != 1 || p2.GetNextPageToken() != "" || p2.GetTopics()[0].GetId() != "zulu" {
		t.Fatalf("page 2: %v, %v", p2, err)
	}

	if _, err := c.DeletePubSubTopic(ctx, &coordinatorv1.DeletePubSubTopicRequest{Id: "orders"}); err != nil {
		t.Fatal(err)
	}
	if cfg := e.storage.config("gcp.orders"); cfg != nil {
		t.Fatal("log gcp.orders still there after DeleteTopic")
	}
	gs, err := c.GetPubSubSubscription(ctx, &coordinatorv1.GetPubSubSubscriptionRequest{Id: "billing"})
	if err != nil || gs.GetSubscription().GetTopicId() != "" {
		t.Fatalf("subscription of a deleted topic: %v, %v", gs, err)
	}
	if _, err := c.DetachPubSubSubscription(ctx, &coordinatorv1.DetachPubSubSubscriptionRequest{Id: "billing"}); err != nil {
		t.Fatal(err)
	}
	if gs, _ := c.GetPubSubSubscription(ctx, &coordinatorv1.GetPubSubSubscriptionRequest{Id: "billing"}); !gs.GetSubscription().GetDetached() {
		t.Fatal("not detached")
	}
	if _, err := c.DeletePubSubSubscription(ctx, &coordinatorv1.DeletePubSubSubscriptionRequest{Id: "billing"}); err != nil {
		t.Fatal(err)
	}
	if e.storage.queues.get("gcp.sub.billing") != nil {
		t.Fatal("queue still there after DeleteSubscription")
	}
	_, err = c.DeletePubSubSubscription(ctx, &coordinatorv1.DeletePubSubSubscriptionRequest{Id: "billing"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("delete again: %v", err)
	}
}

// TestPubSubDeleteTopicUnbinds: DeleteTopic unbinds every subscription of the topic
// before it deletes the log and the row; a failed unbind leaves the topic and its log
// in place (the retry finishes the delete); a topic created again gets a new, empty
// log and the old subscriptions stay unbound.
func TestPubSubDeleteTopicUnbinds(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	c := registryClient(t, r)
	ctx := ctxT(t)
	if _, err := c.CreatePubSubTopic(ctx, &coordinatorv1.CreatePubSubTopicRequest{Topic: &coordinatorv1.PubSubTopic{Id: "tee"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sub1", "sub2"} {
		if _, err := c.CreatePubSubSubscription(ctx, &coordinatorv1.CreatePubSubSubscriptionRequest{Subscription: &coordinatorv1.PubSubSubscription{Id: id, TopicId: "tee"}}); err != nil {
			t.Fatal(err)
		}
	}
	bound := func(q string) bool { return len(e.storage.queues.get(q).GetBindings()) > 0 }

	e.storage.queues.mu.Lock()
	e.storage.queues.failUnbind = map[string]bool{"gcp.sub.sub2": true}
	e.storage.queues.mu.Unlock()
	_, err := c.DeletePubSubTopic(ctx, &coordinatorv1.DeletePubSubTopicRequest{Id: "tee"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("DeleteTopic with a failing unbind: %v", err)
	}
	if _, err := c.GetPubSubTopic(ctx, &coordinatorv1.GetPubSubTopicRequest{Id: "tee"}); err != nil {
		t.Fatalf("topic after a failed delete: %v", err)
	}
	if e.storage.config("gcp.tee") == nil || bound("gcp.sub.sub1") || !bound("gcp.sub.sub2") {
		t.Fatalf("after a failed delete: log %v, s1 bound %v, s2 bound %v", e.storage.config("gcp.tee"), bound("gcp.sub.sub1"), bound("gcp.sub.sub2"))
	}

	e.storage.queues.mu.Lock()
	e.storage.queues.failUnbind = nil
	e.storage.queues.mu.Unlock()
	if _, err := c.DeletePubSubTopic(ctx, &coordinatorv1.DeletePubSubTopicRequest{Id: "tee"}); err != nil {
		t.Fatalf("DeleteTopic retry: %v", err)
	}
	if e.storage.config("gcp.tee") != nil || bound("gcp.sub.sub1") || bound("gcp.sub.sub2") {
		t.Fatal("after DeleteTopic: log still there or a subscription still bound")
	}
	if _, err := c.CreatePubSubTopic(ctx, &coordinatorv1.CreatePubSubTopicRequest{Topic: &coordinatorv1.PubSubTopic{Id: "tee"}}); err != nil {
		t.Fatal(err)
	}
	e.storage.mu.Lock()
	calls := append([]string(nil), e.storage.calls...)
	e.storage.mu.Unlock()
	if n := len(calls); n < 2 || calls[n-1] != "create gcp.tee" || calls[n-2] != "delete gcp.tee" {
		t.Fatalf("storage calls %v: want the log deleted, then created anew", calls)
	}
	if bound("gcp.sub.sub1") || bound("gcp.sub.sub2") {
		t.Fatal("an old subscription is bound to the re-created topic")
	}
	for _, id := range []string{"sub1", "sub2"} {
		gs, err := c.GetPubSubSubscription(ctx, &coordinatorv1.GetPubSubSubscriptionRequest{Id: id})
		if err != nil || gs.GetSubscription().GetTopicId() != "" {
			t.Fatalf("subscription %s: %v, %v", id, gs, err)
		}
	}
}

// TestPubSubConcurrentCreatesAcrossReplicas: two coordinator replicas creating the same
// subscription at once: exactly one succeeds, the other gets ALREADY_EXISTS.
func TestPubSubConcurrentCreatesAcrossReplicas(t *testing.T) {
	e := newEnv(t)
	a, b := start(t, e.cfg, true), start(t, e.cfg, true)
	ca, cb := registryClient(t, a), registryClient(t, b)
	ctx := ctxT(t)
	if _, err := ca.CreatePubSubTopic(ctx, &coordinatorv1.CreatePubSubTopicRequest{Topic: &coordinatorv1.PubSubTopic{Id: "events"}}); err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		id := "race-" + string(rune('a'+round))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, c := range []coordinatorv1.PubSubRegistryServiceClient{ca, cb} {
			wg.Go(func() {
				_, errs[i] = c.CreatePubSubSubscription(ctx, &coordinatorv1.CreatePubSubSubscriptionRequest{
					Subscription: &coordinatorv1.PubSubSubscription{Id: id, TopicId: "events"},
				})
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch status.Code(err) {
			case codes.OK:
				ok++
			case codes.AlreadyExists:
			default:
				t.Fatalf("%s: %v", id, err)
			}
		}
		if ok != 1 || e.storage.queues.get("gcp.sub."+id) == nil {
			t.Fatalf("%s: %d creates succeeded (%v), queue %v", id, ok, errs, e.storage.queues.get("gcp.sub."+id))
		}
	}
}
