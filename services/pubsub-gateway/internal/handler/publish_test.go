package handler

import (
	"context"
	"sync"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// topicRegistry knows topics whose names are in exists.
type topicRegistry struct {
	coordinatorv1.PubSubRegistryServiceClient
	mu     sync.Mutex
	exists map[string]bool
}

func (f *topicRegistry) GetPubSubTopic(_ context.Context, req *coordinatorv1.GetPubSubTopicRequest, _ ...grpc.CallOption) (*coordinatorv1.GetPubSubTopicResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.exists[req.GetId()] {
		return nil, status.Error(codes.NotFound, "no such topic")
	}
	return &coordinatorv1.GetPubSubTopicResponse{Topic: &coordinatorv1.PubSubTopic{Id: req.GetId()}}, nil
}

// closingStore fails appends as storage-core does when the log closes under them, and
// deletes the topic from reg first (DeleteTopic winning the race).
type closingStore struct {
	storagev1.StorageServiceClient
	reg *topicRegistry
}

func (s closingStore) Append(_ context.Context, req *storagev1.AppendRequest, _ ...grpc.CallOption) (*storagev1.AppendResponse, error) {
	s.reg.mu.Lock()
	delete(s.reg.exists, "t1x")
	s.reg.mu.Unlock()
	return nil, status.Error(codes.Unavailable, "closed")
}

// A publish racing DeleteTopic answers NOT_FOUND, not the UNAVAILABLE of the closing
// log (clients would retry it); backend trouble on a live topic stays UNAVAILABLE.
func TestPublishRacingDeleteTopic(t *testing.T) {
	reg := &topicRegistry{exists: map[string]bool{"t1x": true}}
	h := New(Deps{Registry: reg, Storage: closingStore{reg: reg}, Log: zap.NewNop()})
	req := &pubsubpb.PublishRequest{Topic: "projects/p/topics/t1x", Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x")}}}
	if _, err := h.Publish(context.Background(), req); status.Code(err) != codes.NotFound {
		t.Fatalf("publish racing DeleteTopic: %v, want NOT_FOUND", err)
	}
	reg.exists["t2x"] = true
	req.Topic = "projects/p/topics/t2x"
	if _, err := h.Publish(context.Background(), req); status.Code(err) != codes.Unavailable {
		t.Fatalf("publish to a live topic while storage fails: %v, want UNAVAILABLE", err)
	}
}
