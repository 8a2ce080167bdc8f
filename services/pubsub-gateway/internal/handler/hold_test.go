package handler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// bulkQueues hands out msgSize-byte messages without end, as many as a Receive's
// max_bytes allows (at least one, as storage-core), and records the nacks.
type bulkQueues struct {
	storagev1.QueueServiceClient
	mu      sync.Mutex
	next    int
	leased  map[string]bool
	nacked  map[string]bool
	msgSize int
}

func (q *bulkQueues) Receive(ctx context.Context, req *storagev1.ReceiveRequest, _ ...grpc.CallOption) (*storagev1.ReceiveResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	out := &storagev1.ReceiveResponse{}
	for size := 0; len(out.Messages) < int(req.GetMaxMessages()) && (len(out.Messages) == 0 || int64(size+q.msgSize) <= req.GetMaxBytes()); size += q.msgSize {
		q.next++
		id := fmt.Sprintf("ack-%d", q.next)
		q.leased[id] = true
		out.Messages = append(out.Messages, &storagev1.ReceivedMessage{AckId: id, Record: &storagev1.Record{Value: make([]byte, q.msgSize)}})
	}
	return out, nil
}

func (q *bulkQueues) ModifyAckDeadline(_ context.Context, req *storagev1.ModifyAckDeadlineRequest, _ ...grpc.CallOption) (*storagev1.ModifyAckDeadlineResponse, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, id := range req.GetAckIds() {
		q.nacked[id] = true
	}
	return &storagev1.ModifyAckDeadlineResponse{}, nil
}

func (q *bulkQueues) handedOut() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.leased)
}

// stuckClient is a StreamingPull client that never reads: Send blocks until the
// stream ends.
type stuckClient struct {
	pubsubpb.Subscriber_StreamingPullServer
	ctx context.Context
}

func (c stuckClient) Send(*pubsubpb.StreamingPullResponse) error {
	<-c.ctx.Done()
	return c.ctx.Err()
}

// SendMsg is Send for the responses a stream encodes itself (wireResponse).
func (c stuckClient) SendMsg(any) error {
	<-c.ctx.Done()
	return c.ctx.Err()
}

func (c stuckClient) Context() context.Context { return c.ctx }

// inFlight reports whether a Receive of s is in flight (its reservation not ended).
func inFlight(s *stream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reserved > 0 || s.reservedBytes > 0
}

// TestStreamHoldBudget: streams whose clients never read stop leasing at their share
// of the replica's hold budget (limit / open streams, plus at most one message), so
// the replica holds about the limit whatever the number of such streams; when they
// end, every message they held is nacked (none lost) and the budget is empty again;
// whether the streams send proto messages or encode their responses.
func TestStreamHoldBudget(t *testing.T) {
	for _, encode := range []bool{false, true} {
		t.Run(fmt.Sprintf("encode=%v", encode), func(t *testing.T) { testStreamHoldBudget(t, encode) })
	}
}

func testStreamHoldBudget(t *testing.T, encode bool) {
	const (
		limit   = 4 << 20
		msgSize = 256 << 10
		streams = 4
	)
	q := &bulkQueues{leased: map[string]bool{}, nacked: map[string]bool{}, msgSize: msgSize}
	h := New(Deps{Queues: q, Log: zap.NewNop(), StreamBufferBytes: limit, EncodeStreams: encode}).Subscriber
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ss []*stream
	for i := range streams {
		s := &stream{h: h, ss: stuckClient{ctx: ctx}, sub: &subInfo{id: fmt.Sprintf("s%d", i), spec: &pubsubpb.Subscription{}},
			queue: fmt.Sprintf("gcp.sub.s%d", i), outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
		if encode {
			s.enc = &streamEncoder{h: h, sub: s.sub, props: &pubsubpb.StreamingPullResponse_SubscriptionProperties{}}
		}
		s.deadline.Store(10)
		ss = append(ss, s)
		h.budget.streams.Add(1)
	}
	for _, s := range ss {
		wg.Go(func() { _ = s.deliverLoop(ctx) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		full := 0
		for _, s := range ss {
			if s.room() <= 0 && !inFlight(s) { // a Receive in flight holds room it may give back
				full++
			}
		}
		if full == streams {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			t.Fatalf("%d of %d streams reached their share; held %d bytes", full, streams, h.HeldBytes())
		}
		time.Sleep(5 * time.Millisecond)
	}
	n := q.handedOut()
	time.Sleep(200 * time.Millisecond) // watching for more Receives over a span, not waiting for readiness
	if more := q.handedOut() - n; more != 0 {
		t.Errorf("streams at their share leased %d more messages", more)
	}
	if held := h.HeldBytes(); held > limit+streams*msgSize {
		t.Errorf("replica holds %d bytes, limit %d (+ one %d-byte message per stream)", held, limit, msgSize)
	}
	cancel()
	wg.Wait()
	q.mu.Lock()
	defer q.mu.Unlock()
	for id := range q.leased {
		if !q.nacked[id] {
			t.Errorf("%s was leased, never sent and never nacked", id)
		}
	}
	if held := h.HeldBytes(); held != 0 {
		t.Errorf("%d bytes still held after the streams ended", held)
	}
}
