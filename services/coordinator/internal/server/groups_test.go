package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestGroupCoordinatorServed checks the wiring: GroupCoordinatorService answers on the
// coordinator's gRPC port over the migrated database, and commits survive a restart.
func TestGroupCoordinatorServed(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	groups := func(r *running) coordinatorv1.GroupCoordinatorServiceClient {
		cc, err := grpc.NewClient(r.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return coordinatorv1.NewGroupCoordinatorServiceClient(cc)
	}
	meta := "m"
	commit, err := groups(r).OffsetCommit(ctxT(t), &coordinatorv1.OffsetCommitRequest{
		GroupId: "g1", GenerationId: -1,
		Topics: []*coordinatorv1.OffsetCommitTopic{{Name: "orders", Partitions: []*coordinatorv1.OffsetCommitPartition{{Partition: 0, CommittedOffset: 42, CommittedLeaderEpoch: -1, Metadata: &meta}}}},
	})
	if err != nil {
		t.Fatalf("OffsetCommit: %v", err)
	}
	if c := commit.GetTopics()[0].GetPartitions()[0].GetErrorCode(); c != 0 {
		t.Fatalf("OffsetCommit error code %d", c)
	}
	r.stop()

	r2 := start(t, e.cfg, true)
	ctx := ctxT(t)
	var fetched *coordinatorv1.OffsetFetchResponse
	waitFor(t, "offset fetch after restart", func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		fetched, err = groups(r2).OffsetFetch(cctx, &coordinatorv1.OffsetFetchRequest{Groups: []*coordinatorv1.OffsetFetchGroup{{GroupId: "g1", AllTopics: true}}})
		return err
	})
	p := fetched.GetGroups()[0].GetTopics()[0].GetPartitions()[0]
	if p.GetCommittedOffset() != 42 || p.GetMetadata() != "m" {
		t.Fatalf("fetched %v", p)
	}
}

// TestGetCommittedOffsets checks GetCommittedOffsets on the coordinator's gRPC port:
// positions as channels and sequences, lags from storage-core's high watermarks (-1 for
// a missing channel), and the gRPC codes of bad input, unknown groups and a storage-core
// outage.
func TestGetCommittedOffsets(t *testing.T) {
	e := newEnv(t)
	r := start(t, e.cfg, true)
	cc, err := grpc.NewClient(r.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	c := coordinatorv1.NewGroupCoordinatorServiceClient(cc)
	ctx := ctxT(t)

	// kafka.orders holds 5 records; kafka.orders~1 does not exist.
	if _, err := e.storage.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "kafka.orders"}); err != nil {
		t.Fatal(err)
	}
	e.storage.setHighWatermark("kafka.orders", 5)
	meta := "m"
	commit, err := c.OffsetCommit(ctx, &coordinatorv1.OffsetCommitRequest{
		GroupId: "g", GenerationId: -1,
		Topics: []*coordinatorv1.OffsetCommitTopic{{Name: "orders", Partitions: []*coordinatorv1.OffsetCommitPartition{
			{Partition: 0, CommittedOffset: 2, CommittedLeaderEpoch: -1, Metadata: &meta},
			{Partition: 1, CommittedOffset: 7, CommittedLeaderEpoch: -1},
		}}},
	})
	if err != nil || commit.GetTopics()[0].GetPartitions()[0].GetErrorCode() != 0 {
		t.Fatalf("OffsetCommit: %v %v", err, commit)
	}

	resp, err := c.GetCommittedOffsets(ctx, &coordinatorv1.GetCommittedOffsetsRequest{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetGroup() != "g" || resp.GetState() != "Empty" || len(resp.GetPositions()) != 2 {
		t.Fatalf("response = %v", resp)
	}
	p0, p1 := resp.GetPositions()[0], resp.GetPositions()[1]
	if p0.GetChannel() != "kafka.orders" || p0.GetTopic() != "orders" || p0.GetPartition() != 0 || p0.GetNextSequence() != 3 ||
		p0.GetCommittedOffset() != 2 || p0.GetLag() != 3 || p0.GetMetadata() != "m" || p0.GetCommitTimeMs() <= 0 {
		t.Errorf("partition 0 = %v, want channel kafka.orders, next sequence 3, lag 3", p0)
	}
	if p1.GetChannel() != "kafka.orders~1" || p1.GetNextSequence() != 8 || p1.GetLag() != -1 {
		t.Errorf("partition 1 = %v, want channel kafka.orders~1, next sequence 8, lag -1 (no channel)", p1)
	}
	e.storage.setHighWatermark("kafka.orders", 1)
	if resp, err := c.GetCommittedOffsets(ctx, &coordinatorv1.GetCommittedOffsetsRequest{Group: "g", Topic: "orders"}); err != nil ||
		len(resp.GetPositions()) != 2 || resp.GetPositions()[0].GetLag() != 0 {
		t.Errorf("committed past the high watermark: %v %v, want lag 0", resp, err)
	}

	for _, tc := range []struct {
		req  *coordinatorv1.GetCommittedOffsetsRequest
		code codes.Code
	}{
		{&coordinatorv1.GetCommittedOffsetsRequest{Group: "nobody"}, codes.NotFound},
		{&coordinatorv1.GetCommittedOffsetsRequest{}, codes.InvalidArgument},
		{&coordinatorv1.GetCommittedOffsetsRequest{Group: "g", Topic: "a~b"}, codes.InvalidArgument},
	} {
		if _, err := c.GetCommittedOffsets(ctx, tc.req); status.Code(err) != tc.code {
			t.Errorf("GetCommittedOffsets(%v) = %v, want %v", tc.req, err, tc.code)
		}
	}

	e.storage.srv.Stop()
	if _, err := c.GetCommittedOffsets(ctx, &coordinatorv1.GetCommittedOffsetsRequest{Group: "g"}); status.Code(err) != codes.Unavailable {
		t.Errorf("storage-core down: %v, want Unavailable", err)
	}
}
