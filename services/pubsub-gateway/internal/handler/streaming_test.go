package handler

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/natsx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// peekWindow is window without its reservation: what the stream may take now.
func peekWindow(s *stream) (int32, int64, time.Time, bool) {
	msgs, bytes, _, next, full := s.window()
	s.unreserve(msgs, bytes)
	return msgs, bytes, next, full
}

// TestStreamBatchSlowStart: a stream's first Receive asks for firstStreamBatch
// messages and each later one for twice as many, up to maxStreamBatch, so the client
// gets its first messages without waiting for a full batch.
func TestStreamBatchSlowStart(t *testing.T) {
	h := New(Deps{}).Subscriber
	s := &stream{h: h, queue: "gcp.sub.s", outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	var got []int32
	for range 7 {
		msgs, _, _, _ := peekWindow(s)
		got = append(got, msgs)
	}
	want := []int32{100, 200, 400, 800, 1600, 2500, 2500}
	if !slices.Equal(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// TestStreamWindowReserves: two receive loops share a stream's window: what one
// reserved for its Receive in flight the other cannot take, and tracking the answer
// gives the reservation back, so the window counts each message once.
func TestStreamWindowReserves(t *testing.T) {
	now := time.Unix(1000, 0)
	h := New(Deps{Now: func() time.Time { return now }}).Subscriber
	s := &stream{h: h, queue: "gcp.sub.s", maxMsgs: 5, maxBytes: 100, outstanding: map[string]lease{}, wake: make(chan struct{}, 2)}
	h.streams.add(s)
	m1, b1, exact, _, full := s.window()
	if full || m1 != 5 || b1 != 100 || exact {
		t.Fatalf("first reservation = %d, %d, exact %v, %v", m1, b1, exact, full)
	}
	if _, _, _, _, full := s.window(); !full {
		t.Fatal("a second Receive may take the room the first reserved")
	}
	// The first answers two messages of 10 bytes: three messages and 80 bytes are free.
	s.trackAll([]string{"a", "b"}, []int64{10, 10}, now.Add(time.Minute), m1, b1)
	m2, b2, exact, _, full := s.window()
	if full || m2 != 3 || b2 != 80 || !exact {
		t.Fatalf("after tracking = %d, %d, exact %v, %v, want 3, 80, exact", m2, b2, exact, full)
	}
	s.unreserve(m2, b2) // an empty answer
	if m, b, _, _ := peekWindow(s); m != 3 || b != 80 {
		t.Fatalf("after an empty answer = %d, %d, want 3, 80", m, b)
	}
}

// TestStreamWindow: the flow-control book of a stream: tracked leases fill the window,
// acks and nacks through any RPC of the replica (streamBook.done) free it, deadline
// extensions move the deadline it knows; ack ids no stream tracks are reported.
func TestStreamWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	h := New(Deps{Now: func() time.Time { return now }}).Subscriber
	s := &stream{h: h, queue: "gcp.sub.s", maxMsgs: 3, maxBytes: 100, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	h.streams.add(s)
	if msgs, bytes, next, full := peekWindow(s); full || msgs != 3 || bytes != 100 || !next.IsZero() {
		t.Fatalf("empty window = %d, %d, %v, %v", msgs, bytes, next, full)
	}
	s.track("a", 10, now.Add(10*time.Second))
	s.track("b", 10, now.Add(20*time.Second))
	if msgs, bytes, next, _ := peekWindow(s); msgs != 1 || bytes != 80 || !next.Equal(now.Add(10*time.Second)) {
		t.Fatalf("window with two leases = %d, %d, next %v", msgs, bytes, next)
	}
	s.track("c", 10, now.Add(10*time.Second))
	if _, _, _, full := peekWindow(s); !full {
		t.Fatal("window not full at max_outstanding_messages")
	}
	if untracked := h.streams.done("gcp.sub.s", []string{"a", "unknown"}); len(untracked) != 1 || untracked[0] != "unknown" {
		t.Fatalf("untracked ids %v, want [unknown]", untracked)
	}
	select {
	case <-s.wake:
	default:
		t.Fatal("an ack did not wake the stream")
	}
	if msgs, _, _, full := peekWindow(s); full || msgs != 1 {
		t.Fatalf("after an ack: %d, %v", msgs, full)
	}
	h.streams.extend("gcp.sub.s", []string{"c"}, now.Add(time.Minute))
	if _, _, next, _ := peekWindow(s); !next.Equal(now.Add(10 * time.Second)) {
		t.Fatalf("before a's old deadline passed, next = %v, want that deadline (a bound)", next)
	}
	start := now
	now = now.Add(10 * time.Second)
	if _, _, next, _ := peekWindow(s); !next.Equal(start.Add(20 * time.Second)) {
		t.Fatalf("once the bound passed, next = %v, want b's deadline", next)
	}
	h.streams.extend("gcp.sub.s", []string{"c"}, start.Add(15*time.Second))
	if _, _, next, _ := peekWindow(s); !next.Equal(start.Add(15 * time.Second)) {
		t.Fatalf("after c was shortened, next = %v, want c's new deadline", next)
	}
	s.track("big", 200, now.Add(time.Minute))
	if _, _, _, full := peekWindow(s); !full {
		t.Fatal("window not full at max_outstanding_bytes")
	}
	h.streams.drop(s)
	if len(h.streams.byQueue) != 0 {
		t.Fatalf("book after drop: %v", h.streams.byQueue)
	}
	if untracked := h.streams.done("gcp.sub.s", []string{"b"}); len(untracked) != 1 {
		t.Fatalf("a dropped stream's lease is still tracked (untracked %v)", untracked)
	}
}

// TestStreamWindowIsTheClientsLimit: the window is exactly the client's
// max_outstanding_messages/bytes, however fast it settles (Google stops sending at the
// limit); its bytes bind a Receive exactly once anything is outstanding or reserved,
// so only a message alone may be larger than the limit, and never without a byte
// limit.
func TestStreamWindowIsTheClientsLimit(t *testing.T) {
	now := time.Unix(1000, 0)
	h := New(Deps{Now: func() time.Time { return now }}).Subscriber
	s := &stream{h: h, queue: "gcp.sub.s", maxMsgs: 10, maxBytes: 2500, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	h.streams.add(s)
	id := 0
	for range 20 { // 10 settled per 50 ms: a fast consumer
		var ids []string
		for range 10 {
			name := fmt.Sprint(id)
			id++
			s.track(name, 100, now.Add(time.Minute))
			ids = append(ids, name)
		}
		h.streams.done("gcp.sub.s", ids)
		now = now.Add(50 * time.Millisecond)
	}
	if msgs, bytes, exact, _, full := s.window(); full || msgs != 10 || bytes != 2500 || exact {
		t.Fatalf("empty window after fast settling = %d, %d, exact %v, full %v; want 10, 2500, not exact", msgs, bytes, exact, full)
	} else {
		s.unreserve(msgs, bytes)
	}
	for i := range 9 {
		s.track(fmt.Sprint("x", i), 100, now.Add(time.Minute))
	}
	if msgs, bytes, exact, _, full := s.window(); full || msgs != 1 || bytes != 1600 || !exact {
		t.Fatalf("window with 9 outstanding = %d, %d, exact %v, full %v; want 1, 1600, exact", msgs, bytes, exact, full)
	} else {
		s.unreserve(msgs, bytes)
	}
	s.track("x9", 100, now.Add(time.Minute))
	if _, _, _, full := peekWindow(s); !full {
		t.Fatal("window not full at max_outstanding_messages")
	}
	h.streams.done("gcp.sub.s", []string{"x9"})
	s.track("big", 1600, now.Add(time.Minute)) // 2500 bytes outstanding
	if _, _, _, full := peekWindow(s); !full {
		t.Fatal("window not full at max_outstanding_bytes")
	}
	unlimited := &stream{h: h, queue: "gcp.sub.s", maxMsgs: 10, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	unlimited.track("u", 1<<20, now.Add(time.Minute))
	if _, _, exact, _, full := unlimited.window(); full || exact {
		t.Fatalf("a stream without a byte limit: exact %v, full %v", exact, full)
	}
}

// leaseQueues answers GetLeases from a map of ack id -> deadline (ms), or fails.
type leaseQueues struct {
	storagev1.QueueServiceClient
	mu     sync.Mutex
	leases map[string]int64
	fail   bool
	asked  int
}

func (q *leaseQueues) GetLeases(_ context.Context, req *storagev1.GetLeasesRequest, _ ...grpc.CallOption) (*storagev1.GetLeasesResponse, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.asked++
	if q.fail {
		return nil, status.Error(codes.Unavailable, "down")
	}
	out := &storagev1.GetLeasesResponse{}
	for _, id := range req.GetAckIds() {
		out.DeadlinesMs = append(out.DeadlinesMs, q.leases[id])
	}
	return out, nil
}

// TestStreamRefreshLeases: a stream re-reads its leases from storage-core: ack ids no
// longer leased there (acked or nacked through another replica) leave the window,
// extended ones take storage-core's deadline; when storage-core cannot answer, only
// leases past the deadline the stream knows leave.
func TestStreamRefreshLeases(t *testing.T) {
	now := time.Unix(1000, 0)
	q := &leaseQueues{leases: map[string]int64{"kept": now.Add(time.Minute).UnixMilli(), "soon": now.Add(100 * time.Millisecond).UnixMilli()}}
	h := New(Deps{Now: func() time.Time { return now }, Queues: q, Log: zap.NewNop()}).Subscriber
	s := &stream{h: h, queue: "gcp.sub.s", maxMsgs: 4, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	for _, id := range []string{"kept", "soon", "acked-elsewhere"} {
		s.track(id, 1, now.Add(10*time.Second))
	}
	s.refreshLeases(context.Background())
	if _, ok := s.outstanding["acked-elsewhere"]; ok || s.count != 2 {
		t.Fatalf("after the re-read: %v (count %d), want kept and soon", s.outstanding, s.count)
	}
	if untracked := h.streams.done("gcp.sub.s", []string{"acked-elsewhere"}); len(untracked) != 1 {
		t.Fatal("a lease ended elsewhere is still tracked by the stream")
	}
	if d := s.outstanding["kept"].until(); !d.Equal(now.Add(time.Minute)) {
		t.Fatalf("kept's deadline %v, want storage-core's %v", d, now.Add(time.Minute))
	}
	if d := s.outstanding["soon"].until(); d.Before(now.Add(leaseRecheck)) {
		t.Fatalf("soon is looked at again at %v, before the recheck", d)
	}
	q.fail = true
	now = now.Add(30 * time.Second)
	s.refreshLeases(context.Background())
	if _, ok := s.outstanding["soon"]; ok {
		t.Fatal("a lease past its deadline stayed while storage-core was down")
	}
	if _, ok := s.outstanding["kept"]; !ok {
		t.Fatal("a live lease left while storage-core was down")
	}
}

// fakeAnnouncer records announcements.
type fakeAnnouncer struct {
	mu     sync.Mutex
	queues []string
	live   bool
}

func (a *fakeAnnouncer) Announce(q string) {
	a.mu.Lock()
	a.queues = append(a.queues, q)
	a.mu.Unlock()
}

func (a *fakeAnnouncer) Live() bool { return a.live }

// TestWakeUps: an ack or nack of leases this replica's streams do not track is
// announced (a stream elsewhere may track them), one it tracks is not; an announcement
// heard marks the queue's streams stale, so they re-read at once (but not twice
// within the refresh gap), and nothing else; NATS down shortens the recheck.
func TestWakeUps(t *testing.T) {
	now := time.Unix(1000, 0)
	ann := &fakeAnnouncer{live: true}
	h := New(Deps{Now: func() time.Time { return now }, Announce: ann}).Subscriber
	s := &stream{h: h, queue: "gcp.sub.s", maxMsgs: 1, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	other := &stream{h: h, queue: "gcp.sub.other", maxMsgs: 1, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	h.streams.add(s)
	h.streams.add(other)
	h.listeners.add(s)
	h.listeners.add(other)
	s.track("mine", 1, now.Add(10*time.Second))
	h.leasesEnded("gcp.sub.s", []string{"mine"})
	if len(ann.queues) != 0 {
		t.Fatalf("an ack of a tracked lease was announced: %v", ann.queues)
	}
	h.leasesEnded("gcp.sub.s", []string{"theirs"})
	if len(ann.queues) != 1 || ann.queues[0] != "gcp.sub.s" {
		t.Fatalf("announced %v, want [gcp.sub.s]", ann.queues)
	}
	<-s.wake // from the tracked ack
	s.track("x", 1, now.Add(10*time.Second))
	s.refreshedAt = now.Add(-leaseRefreshGap)
	_, _, next, full := peekWindow(s)
	if s.refreshDue(now, next, full) {
		t.Fatal("refresh due with nothing said")
	}
	if !s.refreshDue(now.Add(leaseRecheckLive), next, full) {
		t.Fatal("a full window is not re-read at the recheck")
	}
	h.Wake(natsx.QueueToken("gcp.sub.s"))
	select {
	case <-s.wake:
	default:
		t.Fatal("an announcement did not wake the queue's stream")
	}
	if other.stale.Load() {
		t.Fatal("an announcement woke another queue's stream")
	}
	if !s.refreshDue(now, next, full) {
		t.Fatal("no refresh after an announcement")
	}
	if !s.refreshDue(now.Add(10*time.Second), next, full) {
		t.Fatal("no refresh once a known deadline passed")
	}
	s.refreshedAt = now
	h.Wake(natsx.QueueToken("gcp.sub.s"))
	if s.refreshDue(now.Add(leaseRefreshGap/2), next, full) {
		t.Fatal("two refreshes within the gap")
	}
	if !s.refreshDue(now.Add(leaseRefreshGap), next, full) {
		t.Fatal("the pending wake-up was lost after the gap")
	}
	if s.recheck() != leaseRecheckLive {
		t.Fatal("recheck with NATS up")
	}
	ann.live = false
	if s.recheck() != leaseRecheck {
		t.Fatal("recheck with NATS down")
	}
	h.Wake("") // after a reconnect
	if !other.stale.Load() {
		t.Fatal("a reconnect did not wake every stream")
	}
	h.listeners.remove(s)
	h.listeners.remove(other)
	if len(h.listeners.byToken) != 0 {
		t.Fatalf("listeners left: %v", h.listeners.byToken)
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
	h := New(Deps{Now: func() time.Time { return now }, Queues: resultQueues{results: invalid}}).Subscriber
	s := &stream{h: h, queue: "gcp.sub.sub", maxMsgs: 1, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	h.streams.add(s)
	s.track("a", 10, now.Add(10*time.Second))
	ctx := context.Background()
	_, err := h.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: "projects/p/subscriptions/other", AckIds: []string{"a"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ack of an invalid id: %v", err)
	}
	if _, _, _, full := peekWindow(s); !full {
		t.Fatal("an ack through the wrong subscription freed the stream's window")
	}
	if _, err := h.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: "projects/p/subscriptions/other", AckIds: []string{"a"}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("nack of an invalid id: %v", err)
	}
	if _, _, _, full := peekWindow(s); !full {
		t.Fatal("a nack through the wrong subscription freed the stream's window")
	}
	h.queues = resultQueues{results: []storagev1.AckResult{storagev1.AckResult_ACK_RESULT_EXPIRED}}
	if _, err := h.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: "projects/p/subscriptions/sub", AckIds: []string{"a"}, AckDeadlineSeconds: 60}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("extension of an expired id: %v", err)
	}
	if _, _, _, full := peekWindow(s); full {
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
	h := New(Deps{Queues: q, Log: zap.New(core)}).Subscriber
	s := &stream{h: h, queue: "gcp.sub.s1", outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	s.deadline.Store(10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.receiveLoop(ctx, make(chan batch, 1), nil, true) }()
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

// TestStreamBookSeveralStreams: acks of one call reach whichever streams of the queue
// delivered them, streams of other queues are not touched, and ids no stream holds
// come back untracked.
func TestStreamBookSeveralStreams(t *testing.T) {
	now := time.Unix(1000, 0)
	h := New(Deps{Now: func() time.Time { return now }}).Subscriber
	mk := func(queue string) *stream {
		s := &stream{h: h, queue: queue, maxMsgs: 10, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
		h.streams.add(s)
		return s
	}
	a, b, other := mk("gcp.sub.s"), mk("gcp.sub.s"), mk("gcp.sub.t")
	for _, id := range []string{"a1", "a2", "a3"} {
		a.track(id, 1, now.Add(time.Minute))
	}
	for _, id := range []string{"b1", "b2"} {
		b.track(id, 1, now.Add(time.Minute))
	}
	other.track("a1", 1, now.Add(time.Minute)) // same id, another queue
	untracked := h.streams.done("gcp.sub.s", []string{"a1", "b1", "a2", "b2", "x"})
	if fmt.Sprint(untracked) != "[x]" {
		t.Fatalf("untracked %v, want [x]", untracked)
	}
	if a.count != 1 || b.count != 0 || other.count != 1 {
		t.Fatalf("outstanding after the acks: a %d, b %d, other %d; want 1, 0, 1", a.count, b.count, other.count)
	}
	for _, s := range []*stream{a, b} {
		select {
		case <-s.wake:
		default:
			t.Fatalf("stream %p not woken by the acks that freed it", s)
		}
	}
	h.streams.extend("gcp.sub.s", []string{"a3"}, now.Add(time.Hour))
	if d := a.outstanding["a3"].until(); !d.Equal(now.Add(time.Hour)) {
		t.Fatalf("a3's deadline %v after the extension", d)
	}
	h.streams.drop(a)
	if untracked := h.streams.done("gcp.sub.s", []string{"a3"}); len(untracked) != 1 {
		t.Fatal("a dropped stream's lease is still found")
	}
}

// TestStreamBookChurn: streams of one queue open and close while acks and deadline
// changes of that queue look up their leases: a lookup must neither race with the
// book's changes nor meet a removed stream's slot (run with -race).
func TestStreamBookChurn(t *testing.T) {
	now := time.Unix(1000, 0)
	h := New(Deps{Now: func() time.Time { return now }}).Subscriber
	mk := func(i int) *stream {
		s := &stream{h: h, queue: "gcp.sub.s", maxMsgs: 1000, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
		for j := 0; j < 4; j++ {
			s.track(fmt.Sprint(i, ".", j), 1, now.Add(time.Minute))
		}
		return s
	}
	keep := mk(-1)
	h.streams.add(keep)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ids := []string{fmt.Sprint(i%50, ".0"), "none", fmt.Sprint(i%50, ".1")}
				h.streams.extend("gcp.sub.s", ids, now.Add(time.Hour))
				h.streams.done("gcp.sub.s", ids)
			}
		}()
	}
	var open []*stream
	for i := 0; i < 2000; i++ {
		if len(open) < 8 {
			s := mk(i % 50)
			h.streams.add(s)
			open = append(open, s)
			continue
		}
		k := i % len(open)
		h.streams.drop(open[k])
		open = append(open[:k], open[k+1:]...)
	}
	close(stop)
	wg.Wait()
	for _, s := range open {
		h.streams.drop(s)
	}
	h.streams.drop(keep)
	if len(h.streams.byQueue) != 0 {
		t.Fatalf("book after every drop: %v", h.streams.byQueue)
	}
}

// TestStreamWindowHugeLimits: a client's max_outstanding_messages/bytes at the top of
// the int64 range must not wrap the window's room, which would hold the stream full
// for good.
func TestStreamWindowHugeLimits(t *testing.T) {
	now := time.Unix(1000, 0)
	h := New(Deps{Now: func() time.Time { return now }}).Subscriber
	huge := int64(math.MaxInt64)
	s := &stream{h: h, queue: "gcp.sub.s", maxMsgs: huge, maxBytes: huge, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	h.streams.add(s)
	peekWindow(s)
	var ids []string
	for i := range 100 {
		ids = append(ids, fmt.Sprint(i))
		s.track(ids[i], 1000, now.Add(time.Minute))
	}
	h.streams.done("gcp.sub.s", ids)
	for s.batchLimit < maxStreamBatch { // past the first batches' slow start
		peekWindow(s)
	}
	if msgs, bytes, _, full := peekWindow(s); full || msgs != maxStreamBatch || bytes != maxResponseBytes {
		t.Fatalf("window after settling with huge limits = %d, %d, %v", msgs, bytes, full)
	}
}

// TestStreamBookVisitRandom: visit, locking each stream once per call, finds for each
// id the stream tracking it, and reports the ids none tracks in their order (an id
// given twice and settled the first time is untracked the second), over random books.
func TestStreamBookVisitRandom(t *testing.T) {
	rnd := rand.New(rand.NewSource(9))
	for round := 0; round < 300; round++ {
		h := New(Deps{}).Subscriber
		var ss []*stream
		owner := map[string]*stream{}
		for i := rnd.Intn(4) + 1; i > 0; i-- {
			s := &stream{h: h, queue: "gcp.sub.s", maxMsgs: 1000, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
			h.streams.add(s)
			ss = append(ss, s)
		}
		for i := rnd.Intn(30); i > 0; i-- {
			id := fmt.Sprintf("id%d", rnd.Intn(40))
			if owner[id] == nil {
				s := ss[rnd.Intn(len(ss))]
				s.track(id, 1, time.Unix(1, 0))
				owner[id] = s
			}
		}
		var ids []string
		for i := rnd.Intn(30); i > 0; i-- {
			ids = append(ids, fmt.Sprintf("id%d", rnd.Intn(45)))
		}
		orig := slices.Clone(ids)
		var want []string
		settled := map[string]bool{}
		for _, id := range ids {
			if owner[id] == nil || settled[id] {
				want = append(want, id)
				continue
			}
			settled[id] = true
		}
		got := h.streams.done("gcp.sub.s", ids)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: untracked %v, want %v", round, got, want)
		}
		if !slices.Equal(ids, orig) {
			t.Fatalf("round %d: visit changed its ids: %v, was %v", round, ids, orig)
		}
		for id, s := range owner {
			if _, ok := s.outstanding[id]; ok == settled[id] {
				t.Fatalf("round %d: %s tracked %v after done, settled %v", round, id, ok, settled[id])
			}
		}
	}
}
