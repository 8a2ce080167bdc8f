package handler

import (
	"context"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

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
	h := New(Deps{Queues: q, Log: zap.NewNop()})
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
