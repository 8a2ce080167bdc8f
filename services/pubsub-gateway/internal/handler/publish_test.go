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

// deletingStore answers appends as storage-core does once DeleteTopic deleted the log
// (NOT_FOUND, the registry row not gone yet), or UNAVAILABLE for topics in failing.
type deletingStore struct {
	storagev1.StorageServiceClient
	mu      sync.Mutex
	failing map[string]bool
	appends int
}

func (s *deletingStore) Append(_ context.Context, req *storagev1.AppendRequest, _ ...grpc.CallOption) (*storagev1.AppendResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appends++
	if s.failing[req.GetChannel()] {
		return nil, status.Error(codes.Unavailable, "disk trouble")
	}
	return nil, status.Error(codes.NotFound, "channel deleted")
}

// A publish racing DeleteTopic answers storage-core's NOT_FOUND as the emulator words
// it and forgets the cached topic, so the next publish asks the registry instead of
// appending again; backend trouble on a live topic stays UNAVAILABLE.
func TestPublishRacingDeleteTopic(t *testing.T) {
	reg := &topicRegistry{exists: map[string]bool{"t1x": true, "t2x": true}}
	st := &deletingStore{failing: map[string]bool{"gcp.t2x": true}}
	h := New(Deps{Registry: reg, Storage: st, Log: zap.NewNop()}).Publisher
	req := &pubsubpb.PublishRequest{Topic: "projects/p/topics/t1x", Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x")}}}
	if _, err := h.Publish(context.Background(), req); status.Code(err) != codes.NotFound || status.Convert(err).Message() != msgTopicNotFound {
		t.Fatalf("publish racing DeleteTopic: %v, want NOT_FOUND %q", err, msgTopicNotFound)
	}
	reg.mu.Lock()
	delete(reg.exists, "t1x") // the registry row goes after the log
	reg.mu.Unlock()
	if _, err := h.Publish(context.Background(), req); status.Code(err) != codes.NotFound || st.appends != 1 {
		t.Fatalf("publish after DeleteTopic: %v after %d appends, want NOT_FOUND from the registry after 1", err, st.appends)
	}
	req.Topic = "projects/p/topics/t2x"
	if _, err := h.Publish(context.Background(), req); status.Code(err) != codes.Unavailable {
		t.Fatalf("publish to a live topic while storage fails: %v, want UNAVAILABLE", err)
	}
}
