package handler

import (
	"context"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestStreamWindow: the flow-control book of a stream: tracked leases fill the window,
// acks and nacks through any RPC of the replica (streamBook.done) free it, deadline
// extensions keep leases in it, expired leases leave it.
func TestStreamWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	h := New(Deps{Now: func() time.Time { return now }})
	s := &stream{h: h, maxMsgs: 3, maxBytes: 100, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	if msgs, bytes, full := s.window(now); full || msgs != 3 || bytes != 100 {
		t.Fatalf("empty window = %d, %d, %v", msgs, bytes, full)
	}
	s.track("a", 10, now.Add(10*time.Second))
	s.track("b", 10, now.Add(10*time.Second))
	if msgs, bytes, _ := s.window(now); msgs != 1 || bytes != 80 {
		t.Fatalf("window with two leases = %d, %d", msgs, bytes)
	}
	s.track("c", 10, now.Add(10*time.Second))
	if _, _, full := s.window(now); !full {
		t.Fatal("window not full at max_outstanding_messages")
	}
	h.streams.done([]string{"a", "unknown"})
	select {
	case <-s.wake:
	default:
		t.Fatal("an ack did not wake the stream")
	}
	if msgs, _, full := s.window(now); full || msgs != 1 {
		t.Fatalf("after an ack: %d, %v", msgs, full)
	}
	h.streams.extend([]string{"b"}, now.Add(time.Minute))
	later := now.Add(20 * time.Second)
	if msgs, _, _ := s.window(later); msgs != 2 {
		t.Fatalf("after c expired and b was extended: %d free, want 2", msgs)
	}
	if _, ok := h.streams.byID["c"]; ok {
		t.Fatal("expired lease still in the replica's book")
	}
	s.track("big", 200, later.Add(time.Minute))
	if _, _, full := s.window(later); !full {
		t.Fatal("window not full at max_outstanding_bytes")
	}
	h.streams.drop(s)
	if len(h.streams.byID) != 0 {
		t.Fatalf("book after drop: %v", h.streams.byID)
	}
}

// resultQueues answers Ack and ModifyAckDeadline with fixed results.
type resultQueues struct {
	storagev1.QueueServiceClient
	results []storagev1.AckResult
}

func (q resultQueues) Ack(context.Context, *storagev1.AckRequest, ...grpc.CallOption) (*storagev1.AckResponse, error) {
	return &storagev1.AckResponse{Results: q.results}, nil
}

func (q resultQueues) ModifyAckDeadline(context.Context, *storagev1.ModifyAckDeadlineRequest, ...grpc.CallOption) (*storagev1.ModifyAckDeadlineResponse, error) {
	return &storagev1.ModifyAckDeadlineResponse{Results: q.results}, nil
}

// TestStreamWindowIgnoresInvalidAcks: an ack id sent to a subscription it does not
// belong to (storage-core: INVALID) leaves the lease in its stream's window; an expired
// one leaves it, and a deadline extension of an expired lease does not keep it.
func TestStreamWindowIgnoresInvalidAcks(t *testing.T) {
	now := time.Unix(1000, 0)
	invalid := []storagev1.AckResult{storagev1.AckResult_ACK_RESULT_INVALID}
	h := New(Deps{Now: func() time.Time { return now }, Queues: resultQueues{results: invalid}})
	s := &stream{h: h, maxMsgs: 1, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	s.track("a", 10, now.Add(10*time.Second))
	ctx := context.Background()
	_, err := h.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: "projects/p/subscriptions/other", AckIds: []string{"a"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ack of an invalid id: %v", err)
	}
	if _, _, full := s.window(now); !full {
		t.Fatal("an ack through the wrong subscription freed the stream's window")
	}
	if _, err := h.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: "projects/p/subscriptions/other", AckIds: []string{"a"}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("nack of an invalid id: %v", err)
	}
	if _, _, full := s.window(now); !full {
		t.Fatal("a nack through the wrong subscription freed the stream's window")
	}
	h.queues = resultQueues{results: []storagev1.AckResult{storagev1.AckResult_ACK_RESULT_EXPIRED}}
	if _, err := h.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: "projects/p/subscriptions/sub", AckIds: []string{"a"}, AckDeadlineSeconds: 60}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("extension of an expired id: %v", err)
	}
	if _, _, full := s.window(now); full {
		t.Fatal("an expired lease stayed in the window after a failed extension")
	}
}

// flakyQueues fails Receive UNAVAILABLE fails times, then answers empty until ctx ends.
type flakyQueues struct {
	storagev1.QueueServiceClient
	mu    sync.Mutex
	fails int
	calls int
}

func (q *flakyQueues) Receive(ctx context.Context, _ *storagev1.ReceiveRequest, _ ...grpc.CallOption) (*storagev1.ReceiveResponse, error) {
	q.mu.Lock()
	q.calls++
	fail := q.calls <= q.fails
	q.mu.Unlock()
	if fail {
		return nil, status.Error(codes.Unavailable, "connection refused")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &storagev1.ReceiveResponse{}, nil
}

// TestStreamReceiveOutageLogsOnce: a stream retrying through a storage-core outage
// warns once, not on every retry, and says when it recovered.
func TestStreamReceiveOutageLogsOnce(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	q := &flakyQueues{fails: 4}
	h := New(Deps{Queues: q, Log: zap.New(core)})
	s := &stream{h: h, queue: "gcp.sub.s1", outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	s.deadline.Store(10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.receiveLoop(ctx, make(chan *pubsubpb.StreamingPullResponse, 1)) }()
	deadline := time.Now().Add(10 * time.Second)
	for logs.FilterMessage("streaming pull receive recovered").Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessage("streaming pull receive failed, retrying").Len(); n != 1 {
		t.Fatalf("%d warnings for one outage of 4 failed receives, want 1", n)
	}
	if logs.FilterMessage("streaming pull receive recovered").Len() != 1 {
		t.Fatal("no recovery logged")
	}
}
