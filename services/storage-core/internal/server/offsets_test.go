package server

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/grpcx"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeGroups answers ReadCommittedOffsets for group "g" only.
type fakeGroups struct {
	coordinatorv1.UnimplementedGroupCoordinatorServiceServer
}

func (fakeGroups) ReadCommittedOffsets(_ context.Context, req *coordinatorv1.ReadCommittedOffsetsRequest) (*coordinatorv1.ReadCommittedOffsetsResponse, error) {
	if req.GetGroupId() != "g" {
		return &coordinatorv1.ReadCommittedOffsetsResponse{ErrorCode: kafkaGroupIDNotFound}, nil
	}
	return &coordinatorv1.ReadCommittedOffsetsResponse{State: "Stable", Offsets: []*coordinatorv1.CommittedOffset{
		{Topic: "orders", Partition: 0, CommittedOffset: 2, Metadata: "m", CommitTimeMs: 1234},
		{Topic: "orders", Partition: 1, CommittedOffset: 7},
	}}, nil
}

func TestGetCommittedOffsets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpcx.NewServer(zaptest.NewLogger(t))
	coordinatorv1.RegisterGroupCoordinatorServiceServer(gs, fakeGroups{})
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()

	srv, err := New(Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DataDir: t.TempDir(), CoordinatorAddr: ln.Addr().String()}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	defer func() { stopRun(); <-done }()
	cc, err := grpcx.Dial(srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := storagev1.NewStorageServiceClient(cc)

	// kafka.orders holds 5 records; kafka.orders~1 does not exist.
	if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "kafka.orders"}); err != nil {
		t.Fatal(err)
	}
	recs := make([]*storagev1.AppendRecord, 5)
	for i := range recs {
		recs[i] = &storagev1.AppendRecord{Value: []byte("v")}
	}
	if _, err := c.Append(ctx, &storagev1.AppendRequest{Channel: "kafka.orders", Records: recs}); err != nil {
		t.Fatal(err)
	}

	resp, err := c.GetCommittedOffsets(ctx, &storagev1.GetCommittedOffsetsRequest{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetState() != "Stable" || len(resp.GetPositions()) != 2 {
		t.Fatalf("response = %v", resp)
	}
	p0, p1 := resp.GetPositions()[0], resp.GetPositions()[1]
	if p0.GetChannel() != "kafka.orders" || p0.GetNextSequence() != 3 || p0.GetCommittedOffset() != 2 || p0.GetLag() != 3 || p0.GetMetadata() != "m" || p0.GetCommitTimeMs() != 1234 {
		t.Errorf("partition 0 = %v, want channel kafka.orders, next sequence 3, lag 3", p0)
	}
	if p1.GetChannel() != "kafka.orders~1" || p1.GetNextSequence() != 8 || p1.GetLag() != -1 {
		t.Errorf("partition 1 = %v, want channel kafka.orders~1, next sequence 8, lag -1 (no channel)", p1)
	}

	for _, tc := range []struct {
		req  *storagev1.GetCommittedOffsetsRequest
		code codes.Code
	}{
		{&storagev1.GetCommittedOffsetsRequest{Group: "nobody"}, codes.NotFound},
		{&storagev1.GetCommittedOffsetsRequest{}, codes.InvalidArgument},
		{&storagev1.GetCommittedOffsetsRequest{Group: "g", Topic: "a~b"}, codes.InvalidArgument},
	} {
		if _, err := c.GetCommittedOffsets(ctx, tc.req); status.Code(err) != tc.code {
			t.Errorf("GetCommittedOffsets(%v) = %v, want %v", tc.req, err, tc.code)
		}
	}

	gs.Stop()
	if _, err := c.GetCommittedOffsets(ctx, &storagev1.GetCommittedOffsetsRequest{Group: "g"}); status.Code(err) != codes.Unavailable {
		t.Errorf("coordinator down: %v, want Unavailable", err)
	}
}

func TestGetCommittedOffsetsWithoutCoordinator(t *testing.T) {
	c, stop := startServer(t, t.TempDir())
	defer stop()
	_, err := c.GetCommittedOffsets(context.Background(), &storagev1.GetCommittedOffsetsRequest{Group: "g"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("err = %v, want FailedPrecondition", err)
	}
}
