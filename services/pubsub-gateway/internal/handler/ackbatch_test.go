package handler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// gateQueues records each Ack and ModifyAckDeadline and holds it until the test lets it
// through (one value on gate per call) or its ctx ends. Results come from results by
// ack id (success for the others), cut to short results when short > 0; the calls
// numbered in fail (from 0) fail with that error.
type gateQueues struct {
	storagev1.QueueServiceClient
	gate    chan struct{}
	results map[string]storagev1.AckResult
	short   int
	fail    map[int]error

	mu    sync.Mutex
	calls []gateCall
}

type gateCall struct {
	ids []string
	ms  int32
	ctx context.Context
}

func newGateQueues() *gateQueues {
	return &gateQueues{gate: make(chan struct{}), results: map[string]storagev1.AckResult{}, fail: map[int]error{}}
}

func (q *gateQueues) call(ctx context.Context, ids []string, ms int32) ([]storagev1.AckResult, error) {
	q.mu.Lock()
	n := len(q.calls)
	q.calls = append(q.calls, gateCall{ids: slices.Clone(ids), ms: ms, ctx: ctx})
	q.mu.Unlock()
	select {
	case <-q.gate:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if err := q.fail[n]; err != nil {
		return nil, err
	}
	out := make([]storagev1.AckResult, len(ids))
	for i, id := range ids {
		out[i] = q.results[id]
	}
	if q.short > 0 && q.short < len(out) {
		out = out[:q.short]
	}
	return out, nil
}

func (q *gateQueues) Ack(ctx context.Context, req *storagev1.AckRequest, _ ...grpc.CallOption) (*storagev1.AckResponse, error) {
	rs, err := q.call(ctx, req.GetAckIds(), 0)
	if err != nil {
		return nil, err
	}
	return &storagev1.AckResponse{Results: rs}, nil
}

func (q *gateQueues) ModifyAckDeadline(ctx context.Context, req *storagev1.ModifyAckDeadlineRequest, _ ...grpc.CallOption) (*storagev1.ModifyAckDeadlineResponse, error) {
	rs, err := q.call(ctx, req.GetAckIds(), req.GetAckDeadlineMs())
	if err != nil {
		return nil, err
	}
	return &storagev1.ModifyAckDeadlineResponse{Results: rs}, nil
}

func (q *gateQueues) sent() []gateCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.calls)
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// recvErr waits for a caller's answer, failing the test after 10 s.
func recvErr(t *testing.T, what string, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

// waitCalls waits until q has seen n calls.
func waitCalls(t *testing.T, q *gateQueues, n int) []gateCall {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d storage calls", n), func() bool { return len(q.sent()) >= n })
	return q.sent()
}

// waitPending waits until n callers of key wait behind the call in flight.
func waitPending[K comparable](t *testing.T, c *coalescer[K], key K, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d callers wait", n), func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		l := c.lanes[key]
		return l != nil && len(l.pending) == n
	})
}

func ackReq(ids ...string) *pubsubpb.AcknowledgeRequest {
	return &pubsubpb.AcknowledgeRequest{Subscription: "projects/p/subscriptions/sub", AckIds: ids}
}

const testQueue = "gcp.sub.sub"

// TestAckCoalescing: an ack with none in flight goes out at once; the acks arriving
// while it is in flight go out together as one storage call, ids in arrival order,
// and each caller gets its own results: a per-id failure fails only the call it came
// in, and a short results slice means success for the rest.
func TestAckCoalescing(t *testing.T) {
	q := newGateQueues()
	q.results["b2"] = storagev1.AckResult_ACK_RESULT_EXPIRED
	h := New(Deps{Queues: q}).Subscriber
	ctx := context.Background()
	errs := make([]chan error, 4)
	for i := range errs {
		errs[i] = make(chan error, 1)
	}
	go func() { _, err := h.Acknowledge(ctx, ackReq("a1")); errs[0] <- err }()
	if c := waitCalls(t, q, 1); !slices.Equal(c[0].ids, []string{"a1"}) {
		t.Fatalf("first call %v, want [a1] at once", c[0].ids)
	}
	reqs := [][]string{{"b1", "b2"}, {"c1"}, {"d1", "d2", "d3"}}
	for i, ids := range reqs {
		go func() { _, err := h.Acknowledge(ctx, ackReq(ids...)); errs[i+1] <- err }()
		waitPending(t, h.acks, testQueue, i+1)
	}
	if n := len(q.sent()); n != 1 {
		t.Fatalf("%d storage calls while the first was in flight, want 1", n)
	}
	q.gate <- struct{}{}
	if err := <-errs[0]; err != nil {
		t.Fatalf("first ack: %v", err)
	}
	c := waitCalls(t, q, 2)
	if want := []string{"b1", "b2", "c1", "d1", "d2", "d3"}; !slices.Equal(c[1].ids, want) {
		t.Fatalf("coalesced call %v, want %v", c[1].ids, want)
	}
	q.gate <- struct{}{}
	err := <-errs[1]
	var info *errdetails.ErrorInfo
	if st := status.Convert(err); st.Code() == codes.InvalidArgument && len(st.Details()) == 1 {
		info, _ = st.Details()[0].(*errdetails.ErrorInfo)
	}
	if info == nil || len(info.GetMetadata()) != 1 || info.GetMetadata()["b2"] == "" {
		t.Fatalf("caller of b1, b2: %v (%v), want INVALID_ARGUMENT naming b2", err, info)
	}
	for i := 2; i < len(errs); i++ {
		if err := <-errs[i]; err != nil {
			t.Fatalf("caller %d of the coalesced call got %v, want success", i, err)
		}
	}
	if n := len(q.sent()); n != 2 {
		t.Fatalf("%d storage calls, want 2", n)
	}

	// The same through the coalescer itself: exact slices, short results padded.
	q.short = 2
	res := make([]chan []storagev1.AckResult, 3)
	for i := range res {
		res[i] = make(chan []storagev1.AckResult, 1)
	}
	go func() { rs, _ := h.acks.do(ctx, testQueue, []string{"x"}); res[0] <- rs }()
	waitCalls(t, q, 3)
	go func() { rs, _ := h.acks.do(ctx, testQueue, []string{"b1", "b2"}); res[1] <- rs }()
	waitPending(t, h.acks, testQueue, 1)
	go func() { rs, _ := h.acks.do(ctx, testQueue, []string{"b2", "y"}); res[2] <- rs }()
	waitPending(t, h.acks, testQueue, 2)
	q.gate <- struct{}{}
	waitCalls(t, q, 4)
	q.gate <- struct{}{}
	expired, ok := storagev1.AckResult_ACK_RESULT_EXPIRED, storagev1.AckResult_ACK_RESULT_UNSPECIFIED
	for i, want := range [][]storagev1.AckResult{{ok}, {ok, expired}, {ok, ok}} {
		if got := <-res[i]; !slices.Equal(got, want) {
			t.Errorf("caller %d: results %v, want %v", i, got, want)
		}
	}
}

// TestAckCoalescerCancel: a caller whose ctx ends returns at once; while queued its
// ids are dropped from the next call, once sent the call goes on for the other callers
// and is cancelled when the last stops waiting.
func TestAckCoalescerCancel(t *testing.T) {
	q := newGateQueues()
	h := New(Deps{Queues: q}).Subscriber
	bg := context.Background()
	first := make(chan error, 1)
	go func() { _, err := h.Acknowledge(bg, ackReq("a")); first <- err }()
	waitCalls(t, q, 1)

	ctxB, cancelB := context.WithCancel(bg)
	gone := make(chan error, 1)
	go func() { _, err := h.acks.do(ctxB, testQueue, []string{"b"}); gone <- err }()
	waitPending(t, h.acks, testQueue, 1)
	cancelB()
	if err := recvErr(t, "the caller cancelled while queued", gone); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v, want context.Canceled", err)
	}
	waitPending(t, h.acks, testQueue, 0)

	ctxX, cancelX := context.WithCancel(bg)
	ctxY, cancelY := context.WithCancel(bg)
	defer cancelY()
	x, y := make(chan error, 1), make(chan error, 1)
	go func() { _, err := h.acks.do(ctxX, testQueue, []string{"x"}); x <- err }()
	waitPending(t, h.acks, testQueue, 1)
	go func() { _, err := h.acks.do(ctxY, testQueue, []string{"y"}); y <- err }()
	waitPending(t, h.acks, testQueue, 2)
	q.gate <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	c := waitCalls(t, q, 2)
	if !slices.Equal(c[1].ids, []string{"x", "y"}) {
		t.Fatalf("second call %v, want [x y] (b was cancelled while queued)", c[1].ids)
	}
	cancelX()
	if err := recvErr(t, "the caller cancelled in flight", x); !errors.Is(err, context.Canceled) {
		t.Fatalf("caller cancelled in flight: %v, want context.Canceled", err)
	}
	if c[1].ctx.Err() != nil {
		t.Fatal("the storage call was cancelled while a caller still waited")
	}
	cancelY()
	if err := recvErr(t, "the last caller cancelled in flight", y); !errors.Is(err, context.Canceled) {
		t.Fatalf("second caller cancelled in flight: %v, want context.Canceled", err)
	}
	select {
	case <-c[1].ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the storage call was not cancelled once no caller waited")
	}
	waitFor(t, "the lane is gone", func() bool {
		h.acks.mu.Lock()
		defer h.acks.mu.Unlock()
		return len(h.acks.lanes) == 0
	})
}

// TestAckCoalescerError: a failed coalesced call fails every caller it carried, and
// only those.
func TestAckCoalescerError(t *testing.T) {
	q := newGateQueues()
	q.fail[1] = status.Error(codes.Unavailable, "storage down")
	h := New(Deps{Queues: q}).Subscriber
	ctx := context.Background()
	errs := make([]chan error, 3)
	for i := range errs {
		errs[i] = make(chan error, 1)
	}
	go func() { _, err := h.Acknowledge(ctx, ackReq("a")); errs[0] <- err }()
	waitCalls(t, q, 1)
	for i, id := range []string{"b", "c"} {
		go func() { _, err := h.Acknowledge(ctx, ackReq(id)); errs[i+1] <- err }()
		waitPending(t, h.acks, testQueue, i+1)
	}
	q.gate <- struct{}{}
	waitCalls(t, q, 2)
	q.gate <- struct{}{}
	if err := <-errs[0]; err != nil {
		t.Fatalf("caller of the first call: %v", err)
	}
	for i := 1; i < len(errs); i++ {
		if err := <-errs[i]; status.Code(err) != codes.Unavailable {
			t.Fatalf("caller %d of the failed call: %v, want UNAVAILABLE", i, err)
		}
	}
}

// TestAckCoalescerBound: a coalesced call carries at most max ack ids; callers beyond
// go in the next call, and one caller's ids over the bound go in turns, its results
// put back together in order.
func TestAckCoalescerBound(t *testing.T) {
	q := newGateQueues()
	h := New(Deps{Queues: q}).Subscriber
	h.acks.max = 3
	ctx := context.Background()
	done := make(chan []storagev1.AckResult, 4)
	go func() { rs, _ := h.acks.do(ctx, testQueue, []string{"a"}); done <- rs }()
	waitCalls(t, q, 1)
	for i, ids := range [][]string{{"b1", "b2"}, {"c1", "c2"}, {"d"}} {
		go func() { rs, _ := h.acks.do(ctx, testQueue, ids); done <- rs }()
		waitPending(t, h.acks, testQueue, i+1)
	}
	for range 3 {
		q.gate <- struct{}{}
	}
	for range 4 {
		<-done
	}
	var got [][]string
	for _, c := range q.sent() {
		got = append(got, c.ids)
	}
	if want := [][]string{{"a"}, {"b1", "b2"}, {"c1", "c2", "d"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("calls %v, want %v", got, want)
	}

	q.results["i4"] = storagev1.AckResult_ACK_RESULT_INVALID
	q.results["i1"] = storagev1.AckResult_ACK_RESULT_EXPIRED
	q.short = 2 // each turn answers at most 2 of its ids: the third is taken as success
	ids := []string{"i0", "i1", "i2", "i3", "i4", "i5", "i6"}
	go func() { rs, _ := h.acks.do(ctx, testQueue, ids); done <- rs }()
	for range 3 {
		q.gate <- struct{}{}
	}
	rs := <-done
	got = nil
	for _, c := range q.sent()[3:] {
		got = append(got, c.ids)
	}
	if want := [][]string{ids[0:3], ids[3:6], ids[6:]}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("turns %v, want %v", got, want)
	}
	ok := storagev1.AckResult_ACK_RESULT_UNSPECIFIED
	if want := []storagev1.AckResult{ok, storagev1.AckResult_ACK_RESULT_EXPIRED, ok, ok, storagev1.AckResult_ACK_RESULT_INVALID, ok, ok}; !slices.Equal(rs, want) {
		t.Fatalf("results %v, want %v", rs, want)
	}
}

// TestModAckCoalescing: concurrent deadline changes of one subscription to the same
// deadline go out as one call, each caller's results feeding the stream book; another
// deadline is not held behind them.
func TestModAckCoalescing(t *testing.T) {
	now := time.Unix(1000, 0)
	q := newGateQueues()
	q.results["gone"] = storagev1.AckResult_ACK_RESULT_EXPIRED
	h := New(Deps{Queues: q, Now: func() time.Time { return now }}).Subscriber
	s := &stream{h: h, queue: testQueue, maxMsgs: 10, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	h.streams.add(s)
	for _, id := range []string{"a", "b", "gone"} {
		s.track(id, 1, now.Add(10*time.Second))
	}
	ctx := context.Background()
	modack := func(sec int32, ids ...string) chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := h.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: "projects/p/subscriptions/sub", AckIds: ids, AckDeadlineSeconds: sec})
			errc <- err
		}()
		return errc
	}
	first := modack(60, "z")
	waitCalls(t, q, 1)
	key := modAckKey{queue: testQueue, seconds: 60}
	e1 := modack(60, "a")
	waitPending(t, h.modacks, key, 1)
	e2 := modack(60, "b", "gone")
	waitPending(t, h.modacks, key, 2)
	other := modack(30, "o")
	c := waitCalls(t, q, 2)
	if !slices.Equal(c[1].ids, []string{"o"}) || c[1].ms != 30_000 {
		t.Fatalf("second call %v (%d ms), want [o] at 30 s at once", c[1].ids, c[1].ms)
	}
	q.gate <- struct{}{}
	q.gate <- struct{}{}
	for _, errc := range []chan error{first, other} {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	c = waitCalls(t, q, 3)
	if !slices.Equal(c[2].ids, []string{"a", "b", "gone"}) || c[2].ms != 60_000 {
		t.Fatalf("coalesced call %v (%d ms), want [a b gone] at 60 s", c[2].ids, c[2].ms)
	}
	q.gate <- struct{}{}
	if err := <-e1; err != nil {
		t.Fatalf("caller of a: %v", err)
	}
	if err := <-e2; status.Code(err) != codes.InvalidArgument {
		t.Fatalf("caller of b, gone: %v, want INVALID_ARGUMENT", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.outstanding["gone"]; ok {
		t.Fatal("an expired lease stayed in the window")
	}
	for _, id := range []string{"a", "b"} {
		if d := s.outstanding[id].until(); !d.Equal(now.Add(time.Minute)) {
			t.Errorf("%s's deadline %v, want %v", id, d, now.Add(time.Minute))
		}
	}
}
