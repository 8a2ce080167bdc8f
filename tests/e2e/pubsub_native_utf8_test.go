package e2e

import (
	"context"
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

// TestPubSubNativeHeaderNotUTF8: records appended natively to gcp.<topic> whose header
// values are not UTF-8 (an attribute, the message id, the ordering key) reach Pub/Sub
// subscribers with U+FFFD in those strings, through Pull and the Go client's
// StreamingPull, and so do the valid messages around them. Proto cannot marshal such a
// string, so before they failed every Pull and stream that leased them (INTERNAL) and
// the subscription delivered nothing.
func TestPubSubNativeHeaderNotUTF8(t *testing.T) {
	s := pubsubStack(t)
	pub, sc := rawPubSub(t, s.PubSubAddrs[0])
	st, _ := storageClients(t, s.StorageAddr)
	ctx := ctxT(t, time.Minute)
	topic := psID("utf8")
	mustCreateTopic(t, pub, topic)
	pullSub, streamSub := psID("utf8-pull"), psID("utf8-stream")
	mustCreateSub(t, sc, pullSub, topic, nil)
	mustCreateSub(t, sc, streamSub, topic, nil)
	publish := func(data string) {
		if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topicPath(topic), Messages: []*pubsubpb.PubsubMessage{{Data: []byte(data)}}}); err != nil {
			t.Fatalf("Publish %s: %v", data, err)
		}
	}
	publish("before")
	if _, err := st.Append(ctx, &storagev1.AppendRequest{Channel: channel.PubSubTopic(topic), Records: []*storagev1.AppendRecord{
		{Value: []byte("attr"), Headers: []*storagev1.Header{{Key: "k", Value: []byte("v\xff")}}},
		{Value: []byte("id"), Headers: []*storagev1.Header{{Key: "_pubsub_message_id", Value: []byte("\xfe\xff")}}},
		{Value: []byte("key"), Headers: []*storagev1.Header{{Key: "_pubsub_ordering_key", Value: []byte("o\xfe")}}},
	}}); err != nil {
		t.Fatalf("native Append: %v", err)
	}
	publish("after")
	want := "after attr before id key"

	got := map[string]*pubsubpb.PubsubMessage{}
	for len(got) < 5 && ctx.Err() == nil {
		pr, err := sc.Pull(ctx, &pubsubpb.PullRequest{Subscription: subPath(pullSub), MaxMessages: 10})
		if err != nil {
			t.Fatalf("Pull: %v", err)
		}
		for _, m := range pr.GetReceivedMessages() {
			got[string(m.GetMessage().GetData())] = m.GetMessage()
		}
	}
	if names := sortedKeys(got); names != want {
		t.Fatalf("pulled %q, want %q", names, want)
	}
	if v := got["attr"].GetAttributes()["k"]; v != "v\uFFFD" {
		t.Errorf("attribute k = %q, want %q", v, "v\uFFFD")
	}
	if id := got["id"].GetMessageId(); id != "\uFFFD" {
		t.Errorf("message id = %q, want %q", id, "\uFFFD")
	}
	if k := got["key"].GetOrderingKey(); k != "o\uFFFD" {
		t.Errorf("ordering key = %q, want %q", k, "o\uFFFD")
	}

	c := psClient(t, s.PubSubAddrs[0])
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	streamed := map[string]*pubsubpb.PubsubMessage{}
	err := c.Subscriber(streamSub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		streamed[string(m.Data)] = &pubsubpb.PubsubMessage{Attributes: m.Attributes, MessageId: m.ID, OrderingKey: m.OrderingKey}
		if len(streamed) == 5 {
			cancel()
		}
	})
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if names := sortedKeys(streamed); names != want {
		t.Fatalf("streamed %q, want %q", names, want)
	}
	if v := streamed["attr"].GetAttributes()["k"]; v != "v\uFFFD" {
		t.Errorf("streamed attribute k = %q, want %q", v, "v\uFFFD")
	}
}

func sortedKeys[V any](m map[string]V) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, " ")
}
