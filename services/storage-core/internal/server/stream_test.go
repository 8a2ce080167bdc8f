package server

import (
	"context"
	"errors"
	"io"
	"testing"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestAppendStreamPipelined sends many idempotent batches on one stream without
// waiting for answers: they must be applied in stream order (sequences 0, 1, 2, ...
// would be OUT_OF_ORDER otherwise), each answered once with its own offsets, and a
// duplicate of an earlier batch must get the original offset.
func TestAppendStreamPipelined(t *testing.T) {
	c, stop := startServer(t, t.TempDir())
	defer stop()
	ctx := context.Background()
	for _, ch := range []string{"kafka.s.p.0", "kafka.s.p.1"} {
		if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: ch}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.AppendStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := range n {
		req := &storagev1.AppendStreamRequest{Id: uint64(i) + 1, Channels: []*storagev1.ChannelBatches{
			{Channel: "kafka.s.p.0", Batches: kafkaBatch(t, 7, 0, int32(2*i), "a", "b")},
			{Channel: "kafka.s.p.1", Batches: kafkaBatch(t, 7, 0, int32(i), "c")},
		}}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	// A retry of the batches of request n-2 (still among the producer's last five),
	// and an unknown channel.
	dup := &storagev1.AppendStreamRequest{Id: 1000, Channels: []*storagev1.ChannelBatches{
		{Channel: "kafka.s.p.0", Batches: kafkaBatch(t, 7, 0, int32(2*(n-2)), "a", "b")},
		{Channel: "kafka.s.p.1", Batches: kafkaBatch(t, 7, 0, int32(n-2), "c")},
		{Channel: "kafka.s.p.9", Batches: kafkaBatch(t, 7, 0, 0, "c")},
	}}
	if err := st.Send(dup); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]*storagev1.AppendStreamResponse{}
	for {
		resp, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if seen[resp.Id] != nil {
			t.Fatalf("id %d answered twice", resp.Id)
		}
		seen[resp.Id] = resp
	}
	if len(seen) != n+1 {
		t.Fatalf("%d answers, want %d", len(seen), n+1)
	}
	for i := range n {
		r := seen[uint64(i)+1].Results
		if len(r) != 2 || r[0].Error != 0 || r[1].Error != 0 {
			t.Fatalf("request %d: %v", i, r)
		}
		if r[0].FirstSequence != int64(2*i)+1 || r[1].FirstSequence != int64(i)+1 {
			t.Fatalf("request %d: sequences %d, %d; want %d, %d", i, r[0].FirstSequence, r[1].FirstSequence, 2*i+1, i+1)
		}
	}
	d := seen[1000].Results
	if d[0].Error != 0 || d[0].FirstSequence != 2*(n-2)+1 || d[1].Error != 0 || d[1].FirstSequence != n-1 {
		t.Fatalf("duplicate: %v", d)
	}
	if d[2].Error != storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND {
		t.Fatalf("unknown channel: %v", d[2])
	}
	g, err := c.GetChannel(ctx, &storagev1.GetChannelRequest{Name: "kafka.s.p.0"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Channel.HighWatermark != 2*n {
		t.Fatalf("high watermark %d, want %d", g.Channel.HighWatermark, 2*n)
	}
}

// TestAppendStreamShutdown: a server shutting down ends open append streams with
// UNAVAILABLE (so callers retry on a new stream) instead of holding the drain.
func TestAppendStreamShutdown(t *testing.T) {
	c, stop := startServer(t, t.TempDir())
	ctx := context.Background()
	if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "kafka.s.p.0"}); err != nil {
		t.Fatal(err)
	}
	st, err := c.AppendStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&storagev1.AppendStreamRequest{Id: 1, Channels: []*storagev1.ChannelBatches{
		{Channel: "kafka.s.p.0", Batches: kafkaBatch(t, -1, -1, -1, "x")}}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := st.Recv(); err != nil || resp.Id != 1 || resp.Results[0].Error != 0 {
		t.Fatalf("first answer: %v, %v", resp, err)
	}
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	_, err = st.Recv()
	if code := status.Code(err); code != codes.Unavailable && code != codes.Canceled {
		t.Fatalf("recv after shutdown: %v", err)
	}
	<-done
}
