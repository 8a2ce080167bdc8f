package server

import (
	"context"
	"net"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// deadAddr returns an address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// TestNotReadyIsUnavailable: while storage-core and the coordinator cannot be reached,
// every Pub/Sub RPC answers UNAVAILABLE (the readiness gate), the health service says
// NOT_SERVING, and the server stops cleanly.
func TestNotReadyIsUnavailable(t *testing.T) {
	srv, err := New(Config{GRPCAddr: "127.0.0.1:0", StorageAddr: deadAddr(t), CoordinatorAddr: deadAddr(t)}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	_, err = pubsubpb.NewPublisherClient(cc).GetTopic(cctx, &pubsubpb.GetTopicRequest{Topic: "projects/p/topics/abc"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("GetTopic while not ready: %v, want UNAVAILABLE", err)
	}
	st, err := pubsubpb.NewSubscriberClient(cc).StreamingPull(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("StreamingPull while not ready: %v, want UNAVAILABLE", err)
	}
	h, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health = %v, %v; want NOT_SERVING", h, err)
	}
	if err := srv.backendsReady(cctx); err == nil {
		t.Fatal("readyz passes with no backends")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{StorageAddr: "a", CoordinatorAddr: "b"},
		{GRPCAddr: "x", CoordinatorAddr: "b"},
		{GRPCAddr: "x", StorageAddr: "a"},
		{GRPCAddr: "x", StorageAddr: "a", CoordinatorAddr: "b", NATSURL: "nats://n", ClusterID: "a.b"},
		{GRPCAddr: "x", StorageAddr: "a", CoordinatorAddr: "b", NATSURL: "nats://n"},
		{GRPCAddr: "x", StorageAddr: "a", CoordinatorAddr: "b", StreamBufferBytes: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	ok := Config{GRPCAddr: "x", StorageAddr: "a", CoordinatorAddr: "b", NATSURL: "nats://n", ClusterID: "e2e-1_x"}
	if err := ok.Validate(); err != nil {
		t.Errorf("%+v refused: %v", ok, err)
	}
}

// TestClientMessageLimit: a client's gRPC message is read only up to
// handler.MaxClientMessageBytes (twice Google's 10 MB publish limit): a bigger one is
// refused by gRPC (RESOURCE_EXHAUSTED) before it is held in memory, where the internal
// bus's 256 MiB limit let a few concurrent publishes of that size hold gigabytes only
// to answer INVALID_ARGUMENT. A publish under the cap is still read and answered (here
// by the readiness gate, the backends being absent).
func TestClientMessageLimit(t *testing.T) {
	srv, err := New(Config{GRPCAddr: "127.0.0.1:0", StorageAddr: deadAddr(t), CoordinatorAddr: deadAddr(t)}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	pub := pubsubpb.NewPublisherClient(cc)
	publish := func(n int) error {
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ccancel()
		_, err := pub.Publish(cctx, &pubsubpb.PublishRequest{Topic: "projects/p/topics/abcd",
			Messages: []*pubsubpb.PubsubMessage{{Data: make([]byte, n)}}})
		return err
	}
	if err := publish(12 << 20); status.Code(err) != codes.Unavailable {
		t.Errorf("12 MiB publish while not ready: %v, want UNAVAILABLE (read, then refused by the gate)", err)
	}
	if err := publish(40 << 20); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("40 MiB publish: %v, want RESOURCE_EXHAUSTED (over the client message limit)", err)
	}
}
