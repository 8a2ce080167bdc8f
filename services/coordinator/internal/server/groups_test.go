package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
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
