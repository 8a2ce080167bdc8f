package server

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestPubSubExpiry: the sweep-lock holder deletes a subscription (queue, then row)
// once its TTL passed without activity; activity reports and updates restart the
// clock; a TTL of 0 never expires. The registry's clock is moved by days in
// milliseconds of real time.
func TestPubSubExpiry(t *testing.T) {
	e := newEnv(t)
	clk := &fakeClock{t: time.Now()}
	e.cfg.Now, e.cfg.PubSubExpiryInterval = clk.now, time.Millisecond
	r := start(t, e.cfg, true)
	c := registryClient(t, r)
	ctx := ctxT(t)
	const day = 24 * time.Hour
	if _, err := c.CreatePubSubTopic(ctx, &coordinatorv1.CreatePubSubTopicRequest{Topic: &coordinatorv1.PubSubTopic{Id: "topic"}}); err != nil {
		t.Fatal(err)
	}
	for id, ttl := range map[string]time.Duration{"idle": day, "busy": day, "updated": day, "forever": 0} {
		if _, err := c.CreatePubSubSubscription(ctx, &coordinatorv1.CreatePubSubSubscriptionRequest{Subscription: &coordinatorv1.PubSubSubscription{
			Id: id, TopicId: "topic", ExpirationTtlMs: ttl.Milliseconds(),
		}}); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(id string) bool {
		_, err := c.GetPubSubSubscription(ctx, &coordinatorv1.GetPubSubSubscriptionRequest{Id: id})
		if err != nil && status.Code(err) != codes.NotFound {
			t.Fatalf("get %s: %v", id, err)
		}
		return err != nil
	}
	waitGone := func(id string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !gone(id); {
			if time.Now().After(deadline) {
				t.Fatalf("subscription %s not expired", id)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if e.storage.queues.get("gcp.sub."+id) != nil {
			t.Fatalf("queue of expired subscription %s still there", id)
		}
	}
	if s, err := c.GetPubSubSubscription(ctx, &coordinatorv1.GetPubSubSubscriptionRequest{Id: "idle"}); err != nil ||
		s.GetSubscription().GetExpirationTtlMs() != day.Milliseconds() || s.GetSubscription().GetLastActiveMs() != clk.now().UnixMilli() {
		t.Fatalf("idle: %v, %v", s, err)
	}

	clk.add(20 * time.Hour)
	if _, err := c.RecordPubSubActivity(ctx, &coordinatorv1.RecordPubSubActivityRequest{SubscriptionIds: []string{"busy", "no-such"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdatePubSubSubscription(ctx, &coordinatorv1.UpdatePubSubSubscriptionRequest{Subscription: &coordinatorv1.PubSubSubscription{
		Id: "updated", ExpirationTtlMs: day.Milliseconds(),
	}}); err != nil {
		t.Fatal(err)
	}
	clk.add(5 * time.Hour) // 25 h after create, 5 h after the activity and the update
	waitGone("idle")
	for _, id := range []string{"busy", "updated", "forever"} {
		if gone(id) {
			t.Fatalf("subscription %s expired too early", id)
		}
	}

	clk.add(20 * time.Hour) // 25 h after the activity and the update
	waitGone("busy")
	waitGone("updated")
	// A canary expiring later than "forever" would: once it is gone, a sweep ran
	// after "forever" was a year idle.
	if _, err := c.CreatePubSubSubscription(ctx, &coordinatorv1.CreatePubSubSubscriptionRequest{Subscription: &coordinatorv1.PubSubSubscription{
		Id: "canary", TopicId: "topic", ExpirationTtlMs: day.Milliseconds(),
	}}); err != nil {
		t.Fatal(err)
	}
	clk.add(365 * day)
	waitGone("canary")
	if gone("forever") {
		t.Fatal("subscription without TTL expired")
	}
}
