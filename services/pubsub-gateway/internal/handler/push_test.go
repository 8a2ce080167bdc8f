package handler

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
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
	p := NewPusher(New(Deps{Log: zap.NewNop()}))
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
