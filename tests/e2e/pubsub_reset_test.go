package e2e

import (
	"context"
	"net/http"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// TestPubSubStorageWipedRegistryKept: README's reset case (Postgres kept, storage-core's
// data directory emptied). A topic and a filtered subscription created before are
// usable again once the coordinator has restarted: the Go client publishes and
// receives, and the filter still applies (only matching messages reach the queue). The
// records from before are gone.
func TestPubSubStorageWipedRegistryKept(t *testing.T) {
	s := stack.StartT(t, stack.Options{PubSubGateways: 1})
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	_, queues := storageClients(t, s.StorageAddr)
	topic, sub := psID("wiped"), psID("wiped-sub")
	mustCreateTopic(t, pub, topic)
	mustCreateSub(t, sc, sub, topic, &pubsubpb.Subscription{Filter: `attributes.kind = "paid"`, AckDeadlineSeconds: 30})
	if _, err := pub.Publish(ctxT(t, 30*time.Second), &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: []*pubsubpb.PubsubMessage{
		{Data: []byte("old"), Attributes: map[string]string{"kind": "paid"}},
	}}); err != nil {
		t.Fatalf("Publish before the wipe: %v", err)
	}
	waitBacklog(t, queues, sub, 1, 30*time.Second)

	for _, name := range []string{stack.Coordinator, stack.StorageCore} {
		if err := s.Kill(name, syscall.SIGTERM); err != nil {
			t.Fatalf("stop %s: %v", name, err)
		}
	}
	if err := os.RemoveAll(s.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 2*time.Minute)
	for _, name := range []string{stack.StorageCore, stack.Coordinator} {
		if err := s.Restart(ctx, name); err != nil {
			t.Fatalf("restart %s: %v", name, err)
		}
	}

	// The gateway answers UNAVAILABLE until it sees the coordinator serving again.
	gw := s.PubSub[0]
	waitFor(t, time.Minute, "pubsub-gateway ready again", func() bool {
		resp, err := http.Get("http://" + gw.HTTPAddr + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// The registry still lists both. The gateway may yet have to notice the
	// coordinator's restart (UNAVAILABLE until it sees it serving again).
	var err error
	waitFor(t, time.Minute, "GetTopic answered", func() bool {
		_, err = pub.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topicPath(topic)})
		return status.Code(err) != codes.Unavailable
	})
	if err != nil {
		t.Fatalf("GetTopic after the wipe: %v", err)
	}
	if _, err := sc.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: subPath(sub)}); err != nil {
		t.Fatalf("GetSubscription after the wipe: %v", err)
	}

	c := psClient(t, s.PubSubAddrs[0])
	p := c.Publisher(topic)
	defer p.Stop()
	publish := func(data, kind string) error {
		_, err := p.Publish(ctx, &pubsub.Message{Data: []byte(data), Attributes: map[string]string{"kind": kind}}).Get(ctx)
		return err
	}
	// The coordinator re-creates the channels at start, possibly just after it reports
	// ready: the first publishes may still find no log.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := publish("free-1", "free")
		if err == nil {
			break
		}
		if status.Code(err) != codes.NotFound || time.Now().After(deadline) {
			t.Fatalf("Publish after the wipe: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := publish("paid-1", "paid"); err != nil {
		t.Fatalf("Publish after the wipe: %v", err)
	}
	if err := publish("free-2", "free"); err != nil {
		t.Fatalf("Publish after the wipe: %v", err)
	}
	// Only the matching message entered the queue (the one from before is gone).
	waitBacklog(t, queues, sub, 1, 30*time.Second)

	var mu sync.Mutex
	var got []string
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err = c.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(m.Data))
		cancel()
	})
	if err != nil {
		t.Fatalf("Receive after the wipe: %v", err)
	}
	if len(got) != 1 || got[0] != "paid-1" {
		t.Fatalf("received %q, want only paid-1", got)
	}
	waitBacklog(t, queues, sub, 0, 30*time.Second)
}
