package server

import (
	"context"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

type queueClients struct {
	st storagev1.StorageServiceClient
	q  storagev1.QueueServiceClient
	rf reflectionpb.ServerReflectionClient
}

func startQueueServer(t *testing.T, dir string) (queueClients, func()) {
	t.Helper()
	srv, err := New(Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DataDir: dir}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	cc, err := grpcx.Dial(srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	stop := func() {
		_ = cc.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	return queueClients{storagev1.NewStorageServiceClient(cc), storagev1.NewQueueServiceClient(cc), reflectionpb.NewServerReflectionClient(cc)}, stop
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %v", what, err, code)
	}
}

func TestQueueServiceGRPC(t *testing.T) {
	c, stop := startQueueServer(t, t.TempDir())
	defer stop()
	ctx := context.Background()
	if _, err := c.st.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "gcp.orders"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "_sys.q"})
	wantCode(t, "reserved create", err, codes.PermissionDenied)
	_, err = c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.s", Bindings: []*storagev1.Binding{{Source: "_x"}}})
	wantCode(t, "reserved source", err, codes.PermissionDenied)
	_, err = c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.s", Bindings: []*storagev1.Binding{{Source: "gcp.none"}}})
	wantCode(t, "missing source", err, codes.NotFound)
	_, err = c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.s", Bindings: []*storagev1.Binding{{Source: "gcp.orders", Filter: "attributes.a = "}}})
	wantCode(t, "bad filter", err, codes.InvalidArgument)
	_, err = c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "bad name"})
	wantCode(t, "bad name", err, codes.InvalidArgument)
	_, err = c.st.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "gcp.sub.s", Kind: storagev1.ChannelKind_CHANNEL_KIND_QUEUE})
	wantCode(t, "queue via CreateChannel", err, codes.InvalidArgument)

	cr, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.s",
		Config:   &storagev1.QueueConfig{ExactlyOnce: true},
		Bindings: []*storagev1.Binding{{Source: "gcp.orders"}}})
	if err != nil || !cr.Created {
		t.Fatalf("create: %v %v", cr, err)
	}
	if q := cr.Queue; q.Config.AckDeadlineMs != 10000 || q.Config.MessageRetentionMs != 7*24*3600*1000 || len(q.Bindings) != 1 || q.Bindings[0].Cursor != 1 {
		t.Fatalf("queue %v", q)
	}
	_, err = c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.s"})
	wantCode(t, "dup create", err, codes.AlreadyExists)

	// A native Append to the source reaches the queue; a long poll wakes for it.
	got := make(chan *storagev1.ReceiveResponse, 1)
	go func() {
		r, err := c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.s", MaxMessages: 10, WaitMs: 30000})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	if _, err := c.st.Append(ctx, &storagev1.AppendRequest{Channel: "gcp.orders", Records: []*storagev1.AppendRecord{
		{Value: []byte("hello"), Headers: []*storagev1.Header{{Key: "a", Value: []byte("1")}}}}}); err != nil {
		t.Fatal(err)
	}
	var rr *storagev1.ReceiveResponse
	select {
	case rr = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("long poll not woken")
	}
	if rr == nil || len(rr.Messages) != 1 {
		t.Fatalf("receive %v", rr)
	}
	m := rr.Messages[0]
	if string(m.Record.Value) != "hello" || m.Record.Sequence != 1 || m.Source != "gcp.orders" || m.SourceSequence != 1 || m.DeliveryAttempt != 1 || len(m.Record.Headers) != 1 {
		t.Fatalf("message %v", m)
	}
	gq, err := c.q.GetQueue(ctx, &storagev1.GetQueueRequest{Name: "gcp.sub.s"})
	if err != nil || gq.Queue.Backlog != 1 || gq.Queue.Leased != 1 {
		t.Fatalf("get %v %v", gq, err)
	}
	mr, err := c.q.ModifyAckDeadline(ctx, &storagev1.ModifyAckDeadlineRequest{Queue: "gcp.sub.s", AckIds: []string{m.AckId, "junk"}, AckDeadlineMs: 30000})
	if err != nil || len(mr.Results) != 2 || mr.Results[0] != storagev1.AckResult_ACK_RESULT_UNSPECIFIED || mr.Results[1] != storagev1.AckResult_ACK_RESULT_INVALID {
		t.Fatalf("modack %v %v", mr, err)
	}
	ar, err := c.q.Ack(ctx, &storagev1.AckRequest{Queue: "gcp.sub.s", AckIds: []string{m.AckId, m.AckId}})
	if err != nil || ar.Results[0] != storagev1.AckResult_ACK_RESULT_UNSPECIFIED || ar.Results[1] != storagev1.AckResult_ACK_RESULT_EXPIRED {
		t.Fatalf("ack %v %v", ar, err)
	}

	// Bad input.
	for _, req := range []*storagev1.ReceiveRequest{
		{Queue: "gcp.sub.s", MaxMessages: 0},
		{Queue: "gcp.sub.s", MaxMessages: 10001},
		{Queue: "gcp.sub.s", MaxMessages: 1, AckDeadlineMs: 1000},
		{Queue: "gcp.sub.s", MaxMessages: 1, WaitMs: -1},
	} {
		_, err := c.q.Receive(ctx, req)
		wantCode(t, "receive "+req.String(), err, codes.InvalidArgument)
	}
	_, err = c.q.ModifyAckDeadline(ctx, &storagev1.ModifyAckDeadlineRequest{Queue: "gcp.sub.s", AckDeadlineMs: -1})
	wantCode(t, "modack -1", err, codes.InvalidArgument)
	_, err = c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.none", MaxMessages: 1})
	wantCode(t, "receive missing", err, codes.NotFound)
	_, err = c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "_q", MaxMessages: 1})
	wantCode(t, "receive reserved", err, codes.PermissionDenied)
	_, err = c.q.Ack(ctx, &storagev1.AckRequest{Queue: "gcp.orders"})
	wantCode(t, "ack on a log", err, codes.FailedPrecondition)

	// The queue's log is a channel of kind QUEUE, readable, not writable.
	lr, err := c.st.ListChannels(ctx, &storagev1.ListChannelsRequest{Prefix: "gcp."})
	if err != nil || len(lr.Channels) != 2 || lr.Channels[0].Kind != storagev1.ChannelKind_CHANNEL_KIND_LOG || lr.Channels[1].Kind != storagev1.ChannelKind_CHANNEL_KIND_QUEUE {
		t.Fatalf("list %v %v", lr, err)
	}
	_, err = c.st.Append(ctx, &storagev1.AppendRequest{Channel: "gcp.sub.s", Records: []*storagev1.AppendRecord{{Value: []byte("x")}}})
	wantCode(t, "append to a queue", err, codes.FailedPrecondition)
	rd, err := c.st.Read(ctx, &storagev1.ReadRequest{Channel: "gcp.sub.s"})
	if err != nil || len(rd.Records) != 1 {
		t.Fatalf("read queue log %v %v", rd, err)
	}

	// Reflection sees the service.
	rs, err := c.rf.ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rresp, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range rresp.GetListServicesResponse().GetService() {
		found = found || s.Name == "tributary.storage.v1.QueueService"
	}
	_ = rs.CloseSend()
	if !found {
		t.Fatalf("reflection: %v", rresp)
	}

	// DeleteChannel of a queue deletes it with its state.
	if _, err := c.st.DeleteChannel(ctx, &storagev1.DeleteChannelRequest{Name: "gcp.sub.s"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.q.GetQueue(ctx, &storagev1.GetQueueRequest{Name: "gcp.sub.s"})
	wantCode(t, "get deleted", err, codes.NotFound)
	_, err = c.q.DeleteQueue(ctx, &storagev1.DeleteQueueRequest{Name: "gcp.sub.s"})
	wantCode(t, "delete deleted", err, codes.NotFound)
	if _, err := c.q.DeleteQueue(ctx, &storagev1.DeleteQueueRequest{Name: "gcp.sub.s", IfExists: true}); err != nil {
		t.Fatal(err)
	}
}

// A queue and its acks survive a restart of the server.
func TestQueueServiceRestart(t *testing.T) {
	dir := t.TempDir()
	c, stop := startQueueServer(t, dir)
	ctx := context.Background()
	if _, err := c.st.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "gcp.t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.s", Bindings: []*storagev1.Binding{{Source: "gcp.t"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.st.Append(ctx, &storagev1.AppendRequest{Channel: "gcp.t", Records: []*storagev1.AppendRecord{{Value: []byte("1")}, {Value: []byte("2")}}}); err != nil {
		t.Fatal(err)
	}
	var msgs []*storagev1.ReceivedMessage
	for deadline := time.Now().Add(5 * time.Second); len(msgs) < 2 && time.Now().Before(deadline); {
		r, err := c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.s", MaxMessages: 10, WaitMs: 100})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, r.Messages...)
	}
	if len(msgs) != 2 {
		t.Fatalf("got %d", len(msgs))
	}
	if _, err := c.q.Ack(ctx, &storagev1.AckRequest{Queue: "gcp.sub.s", AckIds: []string{msgs[0].AckId}}); err != nil {
		t.Fatal(err)
	}
	stop()
	c, stop = startQueueServer(t, dir)
	defer stop()
	r, err := c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.s", MaxMessages: 10})
	if err != nil || len(r.Messages) != 1 || string(r.Messages[0].Record.Value) != "2" || r.Messages[0].DeliveryAttempt != 2 {
		t.Fatalf("after restart %v %v", r, err)
	}
}

func TestQueueServiceAdminGRPC(t *testing.T) {
	c, stop := startQueueServer(t, t.TempDir())
	defer stop()
	ctx := context.Background()
	if _, err := c.st.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "gcp.t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.s", Bindings: []*storagev1.Binding{{Source: "gcp.t"}}}); err != nil {
		t.Fatal(err)
	}
	up, err := c.q.UpdateQueueConfig(ctx, &storagev1.UpdateQueueConfigRequest{Name: "gcp.sub.s",
		Config: &storagev1.QueueConfig{AckDeadlineMs: 30000, Retry: &storagev1.RetryPolicy{MinBackoffMs: 1000, MaxBackoffMs: 2000},
			DeadLetter: &storagev1.DeadLetterPolicy{Channel: "gcp.t", MaxDeliveryAttempts: 5, Headers: []*storagev1.Header{{Key: "h", Value: []byte("v")}}}},
		UpdateMask: []string{"ack_deadline_ms", "retry", "dead_letter"}})
	if err != nil || up.Queue.Config.AckDeadlineMs != 30000 || up.Queue.Config.Retry.MaxBackoffMs != 2000 || up.Queue.Config.DeadLetter.Headers[0].Key != "h" {
		t.Fatalf("update %v %v", up, err)
	}
	_, err = c.q.UpdateQueueConfig(ctx, &storagev1.UpdateQueueConfigRequest{Name: "gcp.sub.s", UpdateMask: []string{"filter"}})
	wantCode(t, "update mask", err, codes.InvalidArgument)
	_, err = c.q.UpdateQueueConfig(ctx, &storagev1.UpdateQueueConfigRequest{Name: "gcp.sub.none"})
	wantCode(t, "update missing", err, codes.NotFound)

	if _, err := c.q.CreateSnapshot(ctx, &storagev1.CreateSnapshotRequest{Queue: "gcp.sub.s", Name: "snap"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.q.CreateSnapshot(ctx, &storagev1.CreateSnapshotRequest{Queue: "gcp.sub.s", Name: "snap"})
	wantCode(t, "snapshot twice", err, codes.AlreadyExists)
	_, err = c.q.CreateSnapshot(ctx, &storagev1.CreateSnapshotRequest{Queue: "gcp.sub.s"})
	wantCode(t, "snapshot without a name", err, codes.InvalidArgument)
	if _, err := c.q.Seek(ctx, &storagev1.SeekRequest{Queue: "gcp.sub.s", Target: &storagev1.SeekRequest_Snapshot{Snapshot: "snap"}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.q.Seek(ctx, &storagev1.SeekRequest{Queue: "gcp.sub.s", Target: &storagev1.SeekRequest_Snapshot{Snapshot: "nope"}})
	wantCode(t, "seek to a missing snapshot", err, codes.NotFound)
	_, err = c.q.Seek(ctx, &storagev1.SeekRequest{Queue: "gcp.sub.s"})
	wantCode(t, "seek without target", err, codes.InvalidArgument)
	if _, err := c.q.Seek(ctx, &storagev1.SeekRequest{Queue: "gcp.sub.s", Target: &storagev1.SeekRequest_TimeMs{TimeMs: 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.q.Purge(ctx, &storagev1.PurgeRequest{Queue: "gcp.sub.s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.q.DeleteSnapshot(ctx, &storagev1.DeleteSnapshotRequest{Name: "snap"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.q.DeleteSnapshot(ctx, &storagev1.DeleteSnapshotRequest{Name: "snap"})
	wantCode(t, "delete snapshot twice", err, codes.NotFound)

	if _, err := c.q.Detach(ctx, &storagev1.DetachRequest{Name: "gcp.sub.s"}); err != nil {
		t.Fatal(err)
	}
	g, err := c.q.GetQueue(ctx, &storagev1.GetQueueRequest{Name: "gcp.sub.s"})
	if err != nil || !g.Queue.Detached || len(g.Queue.Bindings) != 0 {
		t.Fatalf("get detached %v %v", g, err)
	}
	_, err = c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.s", MaxMessages: 1})
	wantCode(t, "receive detached", err, codes.FailedPrecondition)
	_, err = c.q.Ack(ctx, &storagev1.AckRequest{Queue: "gcp.sub.s", AckIds: []string{"x"}})
	wantCode(t, "ack detached", err, codes.FailedPrecondition)
	_, err = c.q.Seek(ctx, &storagev1.SeekRequest{Queue: "gcp.sub.s", Target: &storagev1.SeekRequest_TimeMs{TimeMs: 1}})
	wantCode(t, "seek detached", err, codes.FailedPrecondition)
	_, err = c.q.Detach(ctx, &storagev1.DetachRequest{Name: "gcp.sub.none"})
	wantCode(t, "detach missing", err, codes.NotFound)
	if _, err := c.q.DeleteQueue(ctx, &storagev1.DeleteQueueRequest{Name: "gcp.sub.s"}); err != nil {
		t.Fatal(err)
	}
}

// TestQueueServiceSeekReplayAcked: Seek to a time leaves acked messages acked unless
// replay_acked asks for them (Pub/Sub: the topic retains acked messages).
func TestQueueServiceSeekReplayAcked(t *testing.T) {
	c, stop := startQueueServer(t, t.TempDir())
	defer stop()
	ctx := context.Background()
	if _, err := c.st.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "gcp.t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.s", Bindings: []*storagev1.Binding{{Source: "gcp.t"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.st.Append(ctx, &storagev1.AppendRequest{Channel: "gcp.t", Records: []*storagev1.AppendRecord{
		{Value: []byte("a")}, {Value: []byte("b")}}}); err != nil {
		t.Fatal(err)
	}
	// receiveAll leases messages until it has want of them or a poll comes back empty.
	receiveAll := func(want int) []string {
		t.Helper()
		var vals, ids []string
		for len(vals) < want {
			r, err := c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.s", MaxMessages: 10, WaitMs: 2000})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Messages) == 0 {
				break
			}
			for _, m := range r.Messages {
				vals = append(vals, string(m.Record.Value))
				ids = append(ids, m.AckId)
			}
		}
		if len(ids) > 0 {
			if _, err := c.q.Ack(ctx, &storagev1.AckRequest{Queue: "gcp.sub.s", AckIds: ids}); err != nil {
				t.Fatal(err)
			}
		}
		return vals
	}
	if got := receiveAll(2); len(got) != 2 {
		t.Fatalf("received %v, want a and b", got)
	}
	seek := func(replay bool) {
		t.Helper()
		if _, err := c.q.Seek(ctx, &storagev1.SeekRequest{Queue: "gcp.sub.s", Target: &storagev1.SeekRequest_TimeMs{TimeMs: 0}, ReplayAcked: replay}); err != nil {
			t.Fatal(err)
		}
	}
	seek(false)
	r, err := c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.s", MaxMessages: 10, WaitMs: 200})
	if err != nil || len(r.Messages) != 0 {
		t.Fatalf("after a seek back without replay_acked: %v %v", r, err)
	}
	seek(true)
	if got := receiveAll(2); len(got) != 2 {
		t.Fatalf("after a seek back with replay_acked %v, want a and b", got)
	}
}

// catch_up reaches the queue engine: records appended to the source just before a
// Receive with wait_ms 0 are all in its answer.
func TestReceiveCatchUpGRPC(t *testing.T) {
	c, stop := startQueueServer(t, t.TempDir())
	defer stop()
	ctx := context.Background()
	if _, err := c.st.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "gcp.orders"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.q.CreateQueue(ctx, &storagev1.CreateQueueRequest{Name: "gcp.sub.s", Bindings: []*storagev1.Binding{{Source: "gcp.orders"}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		for _, v := range []string{"a", "b"} {
			if _, err := c.st.Append(ctx, &storagev1.AppendRequest{Channel: "gcp.orders", Records: []*storagev1.AppendRecord{{Value: []byte(v)}}}); err != nil {
				t.Fatal(err)
			}
		}
		r, err := c.q.Receive(ctx, &storagev1.ReceiveRequest{Queue: "gcp.sub.s", MaxMessages: 10, CatchUp: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Messages) != 2 {
			t.Fatalf("round %d: %d messages, want 2", i, len(r.Messages))
		}
		ids := []string{r.Messages[0].AckId, r.Messages[1].AckId}
		if _, err := c.q.Ack(ctx, &storagev1.AckRequest{Queue: "gcp.sub.s", AckIds: ids}); err != nil {
			t.Fatal(err)
		}
	}
}

// startShareServer starts a storage-core server on a temp dir for the test and
// returns a context ended at the test's cleanup (which stops the server) and
// StorageService and ShareService clients of it.
func startShareServer(t *testing.T) (context.Context, storagev1.StorageServiceClient, storagev1.ShareServiceClient) {
	t.Helper()
	srv, err := New(Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DataDir: t.TempDir()}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	cc, err := grpcx.Dial(srv.GRPCAddr())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return ctx, storagev1.NewStorageServiceClient(cc), storagev1.NewShareServiceClient(cc)
}
