package handler

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// seekQueues records the Seek it is sent.
type seekQueues struct {
	storagev1.QueueServiceClient
	got *storagev1.SeekRequest
}

func (q *seekQueues) Seek(_ context.Context, req *storagev1.SeekRequest, _ ...grpc.CallOption) (*storagev1.SeekResponse, error) {
	q.got = req
	return &storagev1.SeekResponse{}, nil
}

// Seek to a time before 1970 (a valid Timestamp; Google and the emulator accept it) is
// a seek to before every message, not storage-core's INVALID_ARGUMENT for a negative
// time_ms.
func TestSeekBeforeEpoch(t *testing.T) {
	q := &seekQueues{}
	h := New(Deps{Queues: q, Registry: &seekRegistry{subTopic: map[string]string{"sub1": "t"}}, Log: zap.NewNop()}).Subscriber
	for _, secs := range []int64{-100, -62135596800} { // 1969, year 1
		_, err := h.Seek(context.Background(), &pubsubpb.SeekRequest{
			Subscription: "projects/p/subscriptions/sub1",
			Target:       &pubsubpb.SeekRequest_Time{Time: &timestamppb.Timestamp{Seconds: secs}},
		})
		if err != nil {
			t.Fatalf("Seek to %d s: %v", secs, err)
		}
		if ms := q.got.GetTimeMs(); ms != 0 {
			t.Fatalf("Seek to %d s sent time_ms %d, want 0", secs, ms)
		}
	}
}

// seekRegistry knows subscriptions (id -> topic id, "" once the topic was deleted) and
// topics (id -> spec).
type seekRegistry struct {
	coordinatorv1.PubSubRegistryServiceClient
	subTopic map[string]string
	topics   map[string]*pubsubpb.Topic
}

func (r *seekRegistry) GetPubSubSubscription(_ context.Context, req *coordinatorv1.GetPubSubSubscriptionRequest, _ ...grpc.CallOption) (*coordinatorv1.GetPubSubSubscriptionResponse, error) {
	topic, ok := r.subTopic[req.GetId()]
	if !ok {
		return nil, status.Error(codes.NotFound, "subscription not found")
	}
	return &coordinatorv1.GetPubSubSubscriptionResponse{Subscription: &coordinatorv1.PubSubSubscription{Id: req.GetId(), TopicId: topic}}, nil
}

func (r *seekRegistry) GetPubSubTopic(_ context.Context, req *coordinatorv1.GetPubSubTopicRequest, _ ...grpc.CallOption) (*coordinatorv1.GetPubSubTopicResponse, error) {
	t, ok := r.topics[req.GetId()]
	if !ok {
		return nil, status.Error(codes.NotFound, "topic not found")
	}
	b, _ := proto.Marshal(t)
	return &coordinatorv1.GetPubSubTopicResponse{Topic: &coordinatorv1.PubSubTopic{Id: req.GetId(), Spec: b}}, nil
}

// A Seek to a time replays acked messages only when the subscription's topic retains
// them (Google: topic message retention lets subscriptions replay acked messages);
// subscriptions of a topic without retention, of a deleted topic or of one the
// registry no longer has do not ask for it. A missing subscription is NOT_FOUND.
func TestSeekReplaysAckedWithTopicRetention(t *testing.T) {
	q := &seekQueues{}
	reg := &seekRegistry{
		subTopic: map[string]string{"kept": "retained", "plain": "plain", "orphan": "", "raced": "gone"},
		topics: map[string]*pubsubpb.Topic{
			"retained": {MessageRetentionDuration: durationpb.New(time.Hour)},
			"plain":    {},
		},
	}
	h := New(Deps{Queues: q, Registry: reg, Log: zap.NewNop()}).Subscriber
	seek := func(sub string) (*storagev1.SeekRequest, error) {
		q.got = nil
		_, err := h.Seek(context.Background(), &pubsubpb.SeekRequest{
			Subscription: "projects/p/subscriptions/" + sub,
			Target:       &pubsubpb.SeekRequest_Time{Time: timestamppb.New(time.Now().Add(-time.Hour))},
		})
		return q.got, err
	}
	for sub, want := range map[string]bool{"kept": true, "plain": false, "orphan": false, "raced": false} {
		got, err := seek(sub)
		if err != nil {
			t.Fatalf("Seek %s: %v", sub, err)
		}
		if got.GetReplayAcked() != want {
			t.Errorf("Seek %s sent replay_acked %v, want %v", sub, got.GetReplayAcked(), want)
		}
	}
	if got, err := seek("missing"); status.Code(err) != codes.NotFound || got != nil {
		t.Errorf("Seek of a missing subscription: %v (sent %v), want NOT_FOUND", err, got)
	}
}
