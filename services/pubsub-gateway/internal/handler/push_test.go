package handler

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// With no_wrapper.write_metadata, attributes become HTTP headers; one that cannot be a
// header (a space in its key, a newline in its value, both valid in Pub/Sub) must not
// make every push of the message fail forever: it is left out.
func TestPushWriteMetadataInvalidHeader(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
	}))
	defer srv.Close()
	p := NewPusher(New(Deps{Log: zap.NewNop()}).Subscriber)
	defer p.client.CloseIdleConnections()
	sub := &subInfo{id: "s1", spec: &pubsubpb.Subscription{Name: "projects/p/subscriptions/s1", PushConfig: &pubsubpb.PushConfig{
		PushEndpoint: srv.URL,
		Wrapper:      &pubsubpb.PushConfig_NoWrapper_{NoWrapper: &pubsubpb.PushConfig_NoWrapper{WriteMetadata: true}},
	}}}
	rm := &pubsubpb.ReceivedMessage{AckId: "a", Message: &pubsubpb.PubsubMessage{
		Data: []byte("d"), MessageId: "1",
		Attributes: map[string]string{"ok": "v", "a b": "v", "nl": "x\ny", "é": "v"},
	}}
	if err := p.post(context.Background(), sub, rm); err != nil {
		t.Fatalf("push with unrepresentable attributes: %v", err)
	}
	if got.Get("ok") != "v" || got.Get("x-goog-pubsub-message-id") != "1" {
		t.Fatalf("headers %v", got)
	}
}

// The same for an ordering key and a message id no HTTP header can carry: a newline
// is valid in a Pub/Sub ordering key, and a native append sets the message id header
// to any bytes. The push goes out without those headers.
func TestPushWriteMetadataInvalidOrderingKey(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
	}))
	defer srv.Close()
	p := NewPusher(New(Deps{Log: zap.NewNop()}).Subscriber)
	defer p.client.CloseIdleConnections()
	sub := &subInfo{id: "s1", spec: &pubsubpb.Subscription{Name: "projects/p/subscriptions/s1", PushConfig: &pubsubpb.PushConfig{
		PushEndpoint: srv.URL,
		Wrapper:      &pubsubpb.PushConfig_NoWrapper_{NoWrapper: &pubsubpb.PushConfig_NoWrapper{WriteMetadata: true}},
	}}}
	rm := &pubsubpb.ReceivedMessage{AckId: "a", Message: &pubsubpb.PubsubMessage{
		Data: []byte("d"), MessageId: "id\r\n1", OrderingKey: "line1\nline2",
		Attributes: map[string]string{"ok": "v"},
	}}
	if err := p.post(context.Background(), sub, rm); err != nil {
		t.Fatalf("push of a message whose ordering key and id cannot be headers: %v", err)
	}
	if got.Get("ok") != "v" || got.Get("x-goog-pubsub-subscription-name") == "" {
		t.Fatalf("headers %v", got)
	}
	if got.Get("x-goog-pubsub-ordering-key") != "" || got.Get("x-goog-pubsub-message-id") != "" {
		t.Fatalf("unrepresentable headers sent: %v", got)
	}
}

type fakeRegistry struct {
	coordinatorv1.PubSubRegistryServiceClient
	mu   sync.Mutex
	subs []*coordinatorv1.PubSubSubscription
}

func (f *fakeRegistry) ListPubSubSubscriptions(context.Context, *coordinatorv1.ListPubSubSubscriptionsRequest, ...grpc.CallOption) (*coordinatorv1.ListPubSubSubscriptionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &coordinatorv1.ListPubSubSubscriptionsResponse{Subscriptions: f.subs}, nil
}

func (f *fakeRegistry) set(t *testing.T, s *pubsubpb.Subscription) {
	b, err := proto.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.subs = []*coordinatorv1.PubSubSubscription{{Id: "s1", TopicId: "t1", Spec: b}}
	f.mu.Unlock()
}

// idleQueues is a QueueService with nothing to deliver.
type idleQueues struct{ storagev1.QueueServiceClient }

func (idleQueues) Receive(ctx context.Context, _ *storagev1.ReceiveRequest, _ ...grpc.CallOption) (*storagev1.ReceiveResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A push subscription whose settings change without a new endpoint (ModifyPushConfig
// to no_wrapper, a new ack deadline) is pushed with the new settings.
func TestPushWorkerFollowsSettings(t *testing.T) {
	reg := &fakeRegistry{}
	p := NewPusher(New(Deps{Registry: reg, Queues: idleQueues{}, Log: zap.NewNop()}).Subscriber)
	defer p.stopAll()
	ctx := context.Background()
	s := &pubsubpb.Subscription{Name: "projects/p/subscriptions/s1", AckDeadlineSeconds: 10, PushConfig: &pubsubpb.PushConfig{PushEndpoint: "http://127.0.0.1:1/push"}}
	reg.set(t, s)
	if err := p.scan(ctx); err != nil {
		t.Fatal(err)
	}
	s.PushConfig.Wrapper = &pubsubpb.PushConfig_NoWrapper_{NoWrapper: &pubsubpb.PushConfig_NoWrapper{}}
	s.AckDeadlineSeconds = 60
	reg.set(t, s)
	if err := p.scan(ctx); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	w := p.workers["s1"]
	p.mu.Unlock()
	if w == nil || w.spec.GetPushConfig().GetNoWrapper() == nil || w.spec.GetAckDeadlineSeconds() != 60 {
		t.Fatalf("worker pushes with %v, want the updated settings", w.spec)
	}
}
