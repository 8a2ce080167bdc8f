package handler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Hostile tests of the two receive loops of a stream (4e6b18e): the shared window's
// reservations, the hold budget, wake-ups and the stream's end.

// TestHostileTwoLoopsStaleWakeReachesRefresher: with the window full and both receive
// loops paused, a wake-up saying leases of the queue ended elsewhere (listeners.wake:
// stale + one notify) must make the refresher re-read the leases within about
// leaseRefreshGap. wake is one channel both loops read, and notify puts one token in
// it: when the second loop takes it, it cannot refresh (only the first does) and
// pauses again, and the refresher sleeps on until its recheck (5 s with NATS live),
// the stream stuck full all that while.
//
// Failed on 4e6b18e (one wake channel for both loops).
func TestHostileTwoLoopsStaleWakeReachesRefresher(t *testing.T) {
	far := time.Now().Add(time.Hour)
	q := &leaseQueues{leases: map[string]int64{"a": far.UnixMilli(), "b": far.UnixMilli()}}
	h := New(Deps{Queues: q, Log: zap.NewNop(), Announce: &fakeAnnouncer{live: true}}).Subscriber
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &stream{h: h, ss: stuckClient{ctx: ctx}, sub: &subInfo{id: "s", spec: &pubsubpb.Subscription{}},
		queue: "gcp.sub.s", maxMsgs: 2, outstanding: map[string]lease{}, wake: make(chan struct{}, 1), wakeOthers: make(chan struct{}, streamReceivers-1)}
	s.deadline.Store(10)
	s.track("a", 1, far)
	s.track("b", 1, far)
	h.listeners.add(s)
	defer h.listeners.remove(s)
	done := make(chan error, 1)
	go func() { done <- s.deliverLoop(ctx) }()
	asked := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.asked
	}
	// The refresher re-reads once at the start (full, never re-read): then both pause.
	for deadline := time.Now().Add(10 * time.Second); asked() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the full stream never re-read its leases")
		}
		time.Sleep(time.Millisecond)
	}
	for trial := range 6 {
		time.Sleep(2 * leaseRefreshGap) // past the refresh gap, both loops back in pause
		n := asked()
		s.stale.Store(true) // what listeners.wake does for an announcement
		s.notify()
		deadline := time.Now().Add(2 * time.Second) // well before leaseRecheckLive
		for asked() == n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if asked() == n {
			t.Errorf("trial %d: a stale wake-up did not make the stream re-read its leases within 2s (recheck %v)", trial, leaseRecheckLive)
			break
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) { // a Send cut by the cancel
		t.Fatal(err)
	}
}

// countingQueues counts Receive calls and blocks each until ctx ends.
type countingQueues struct {
	storagev1.QueueServiceClient
	receives atomic.Int64
}

func (q *countingQueues) Receive(ctx context.Context, _ *storagev1.ReceiveRequest, _ ...grpc.CallOption) (*storagev1.ReceiveResponse, error) {
	q.receives.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestHostileSecondLoopDoesNotSpinOnPassedDeadline: while the first loop holds the
// window's last room for its long-poll Receive (up to streamPollWait), the second finds
// the window full. If a deadline the stream knows has passed (a client extending
// through another replica, a lease expired), pause waits max(next-now, 1ms) = 1 ms:
// but only the refresher re-reads leases, so the second loop wakes every millisecond
// for the whole of the other's Receive, each time scanning every outstanding lease
// under s.mu (window: earliestLocked, since nextBound has passed).
//
// Failed on 4e6b18e (the second loop woke for a deadline only the first acts on).
func TestHostileSecondLoopDoesNotSpinOnPassedDeadline(t *testing.T) {
	var nows atomic.Int64
	q := &countingQueues{}
	h := New(Deps{Queues: q, Log: zap.NewNop(), Now: func() time.Time { nows.Add(1); return time.Now() }}).Subscriber
	s := &stream{h: h, queue: "gcp.sub.s", maxMsgs: 10, outstanding: map[string]lease{}, wake: make(chan struct{}, 1), wakeOthers: make(chan struct{}, streamReceivers-1)}
	s.deadline.Store(10)
	for i := range 9 {
		s.track(fmt.Sprint("old-", i), 1, time.Now().Add(-time.Second)) // deadline passed
	}
	// The first loop's Receive in flight: it reserved the last message of the window.
	if m, _, _, _, full := s.window(); full || m != 1 {
		t.Fatalf("reservation = %d, %v", m, full)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.receiveLoop(ctx, make(chan batch, 1), nil, false) }()
	start := nows.Load()
	time.Sleep(300 * time.Millisecond) // watching the loop over a span, not waiting for readiness
	iterations := nows.Load() - start
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) { // a Send cut by the cancel
		t.Fatal(err)
	}
	if q.receives.Load() != 0 {
		t.Fatalf("the second loop received %d times through a full window", q.receives.Load())
	}
	// A loop that waits for a wake-up or its recheck (1 s) runs once or twice here.
	if iterations > 30 {
		t.Errorf("the non-refresher loop ran %d times in 300ms with a full window and a passed deadline (busy wait)", iterations)
	}
}

// churnQueues hands out messages (sometimes none, sometimes failing UNAVAILABLE or
// with the context), as many as max_messages and max_bytes allow (at least one), and
// answers every lease re-read as still leased.
type churnQueues struct {
	storagev1.QueueServiceClient
	mu      sync.Mutex
	rnd     *rand.Rand
	next    int
	leased  map[string]bool
	nacked  map[string]bool
	msgSize int
	maxAsk  int32
}

func (q *churnQueues) Receive(ctx context.Context, req *storagev1.ReceiveRequest, _ ...grpc.CallOption) (*storagev1.ReceiveResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q.mu.Lock()
	q.maxAsk = max(q.maxAsk, req.GetMaxMessages())
	r := q.rnd.IntN(50)
	q.mu.Unlock()
	time.Sleep(time.Duration(r%3) * 100 * time.Microsecond) // let the two loops overlap
	switch r {
	case 0:
		return nil, status.Error(codes.Unavailable, "down")
	case 1, 2, 3, 4:
		return &storagev1.ReceiveResponse{}, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	out := &storagev1.ReceiveResponse{}
	n := 1 + q.rnd.IntN(int(req.GetMaxMessages()))
	for size := 0; len(out.Messages) < n && (len(out.Messages) == 0 || int64(size+q.msgSize) <= req.GetMaxBytes()); size += q.msgSize {
		q.next++
		id := fmt.Sprintf("ack-%d", q.next)
		q.leased[id] = true
		out.Messages = append(out.Messages, &storagev1.ReceivedMessage{AckId: id, Record: &storagev1.Record{Value: make([]byte, q.msgSize)}})
	}
	return out, nil
}

func (q *churnQueues) ModifyAckDeadline(_ context.Context, req *storagev1.ModifyAckDeadlineRequest, _ ...grpc.CallOption) (*storagev1.ModifyAckDeadlineResponse, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, id := range req.GetAckIds() {
		q.nacked[id] = true
	}
	return &storagev1.ModifyAckDeadlineResponse{Results: make([]storagev1.AckResult, len(req.GetAckIds()))}, nil
}

func (q *churnQueues) GetLeases(_ context.Context, req *storagev1.GetLeasesRequest, _ ...grpc.CallOption) (*storagev1.GetLeasesResponse, error) {
	out := &storagev1.GetLeasesResponse{}
	for range req.GetAckIds() {
		out.DeadlinesMs = append(out.DeadlinesMs, time.Now().Add(time.Hour).UnixMilli())
	}
	return out, nil
}

// ackingClient records what a stream sends, checks the stream's window at each Send,
// and acks what it got through the replica's stream book (as an ack would).
type ackingClient struct {
	pubsubpb.Subscriber_StreamingPullServer
	ctx      context.Context
	s        *stream
	mu       sync.Mutex
	got      map[string]int
	maxCount int64
	ack      bool
}

func (c *ackingClient) Send(resp *pubsubpb.StreamingPullResponse) error {
	var ids []string
	for _, m := range resp.GetReceivedMessages() {
		ids = append(ids, m.GetAckId())
	}
	c.s.mu.Lock()
	count := c.s.count
	c.s.mu.Unlock()
	c.mu.Lock()
	c.maxCount = max(c.maxCount, count)
	for _, id := range ids {
		c.got[id]++
	}
	ack := c.ack
	c.mu.Unlock()
	if ack && len(ids) > 0 {
		c.s.h.streams.done(c.s.queue, ids)
	}
	return c.ctx.Err()
}

func (c *ackingClient) Context() context.Context { return c.ctx }

// TestHostileTwoLoopsSmallWindowsAccounting: for client limits of 1..10 messages, two
// receive loops under churn (empty answers, UNAVAILABLE, partial answers) never let
// the window hold more than the limit, no message is sent twice, every message leased
// is sent or nacked, and when the stream ends no reservation and no held byte is left.
func TestHostileTwoLoopsSmallWindowsAccounting(t *testing.T) {
	for _, limit := range []int64{1, 2, 3, 10} {
		for _, ack := range []bool{true, false} {
			t.Run(fmt.Sprintf("limit=%d/ack=%v", limit, ack), func(t *testing.T) {
				testTwoLoopsAccounting(t, limit, ack)
			})
		}
	}
}

func testTwoLoopsAccounting(t *testing.T, limit int64, ack bool) {
	now := time.Now()
	q := &churnQueues{rnd: rand.New(rand.NewPCG(uint64(limit), 7)), leased: map[string]bool{}, nacked: map[string]bool{}, msgSize: 100}
	h := New(Deps{Queues: q, Log: zap.NewNop(), Now: func() time.Time { return now }}).Subscriber
	ctx, cancel := context.WithCancel(context.Background())
	c := &ackingClient{ctx: ctx, got: map[string]int{}, ack: ack}
	s := &stream{h: h, ss: c, sub: &subInfo{id: "s", spec: &pubsubpb.Subscription{}},
		queue: "gcp.sub.s", maxMsgs: limit, outstanding: map[string]lease{}, wake: make(chan struct{}, 1), wakeOthers: make(chan struct{}, streamReceivers-1)}
	c.s = s
	s.deadline.Store(10)
	h.budget.streams.Add(1)
	h.streams.add(s)
	defer h.streams.drop(s)
	done := make(chan error, 1)
	go func() { done <- s.deliverLoop(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.mu.Lock()
		n := q.next
		q.mu.Unlock()
		if n >= 2000 || (!ack && n >= int(limit)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d messages leased in 10s", n)
		}
		time.Sleep(time.Millisecond)
	}
	if !ack {
		time.Sleep(50 * time.Millisecond) // watching for leases past the window over a span
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) { // a Send cut by the cancel
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if c.maxCount > s.maxMsgs {
		t.Errorf("window held %d messages, limit %d", c.maxCount, s.maxMsgs)
	}
	if q.maxAsk > int32(s.maxMsgs) {
		t.Errorf("a Receive asked for %d messages, window %d", q.maxAsk, s.maxMsgs)
	}
	if !ack && len(q.leased) > int(s.maxMsgs) {
		t.Errorf("%d messages leased with nothing acked, window %d", len(q.leased), s.maxMsgs)
	}
	for id, n := range c.got {
		if n > 1 {
			t.Errorf("%s sent %d times", id, n)
		}
	}
	for id := range q.leased {
		if c.got[id] == 0 && !q.nacked[id] {
			t.Errorf("%s was leased, never sent and never nacked", id)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reserved != 0 || s.reservedBytes != 0 {
		t.Errorf("reservation left after the stream ended: %d messages, %d bytes", s.reserved, s.reservedBytes)
	}
	if held := s.held.Load(); held != 0 || h.HeldBytes() != 0 {
		t.Errorf("%d bytes (replica %d) still held after the stream ended", held, h.HeldBytes())
	}
}
