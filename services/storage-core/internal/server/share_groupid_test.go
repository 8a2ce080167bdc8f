package server

import (
	"strings"
	"testing"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestShareFetchLongGroupID: ShareService serves a share group whose id is longer
// than a hex-named queue could hold (Kafka accepts any non-empty group id, and
// ShareGroupHeartbeat lets such a member join): ShareFetch starts its state, the
// partition is listed and described. An empty id stays INVALID_ARGUMENT.
func TestShareFetchLongGroupID(t *testing.T) {
	ctx, sc, shc := startShareServer(t)
	if _, err := sc.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: channel.KafkaPartition("orders", 0)}); err != nil {
		t.Fatal(err)
	}
	part := []*storagev1.SharePartitionRef{{Topic: "orders", Partition: 0}}
	for _, n := range []int{123, 255, 1000} {
		g := strings.Repeat("g", n)
		r, err := shc.ShareFetch(ctx, &storagev1.ShareFetchRequest{GroupId: g, MemberId: "m", MaxRecords: 10, Partitions: part})
		if err != nil {
			t.Fatalf("ShareFetch for a %d-byte group id: %v", n, err)
		}
		if p := r.Partitions[0]; p.Error != storagev1.ShareError_SHARE_ERROR_UNSPECIFIED {
			t.Fatalf("ShareFetch for a %d-byte group id: %v (%s)", n, p.Error, p.Message)
		}
		l, err := shc.ListSharePartitions(ctx, &storagev1.ListSharePartitionsRequest{GroupId: g})
		if err != nil || len(l.GetPartitions()) != 1 {
			t.Fatalf("ListSharePartitions for a %d-byte group id: %v %v", n, l, err)
		}
		d, err := shc.DescribeSharePartitions(ctx, &storagev1.DescribeSharePartitionsRequest{GroupId: g, Partitions: part})
		if err != nil || d.Partitions[0].Error != storagev1.ShareError_SHARE_ERROR_UNSPECIFIED {
			t.Fatalf("DescribeSharePartitions for a %d-byte group id: %v %v", n, d, err)
		}
	}
	if _, err := shc.ShareFetch(ctx, &storagev1.ShareFetchRequest{MemberId: "m", MaxRecords: 10, Partitions: part}); err == nil {
		t.Fatal("ShareFetch without a group id accepted")
	}
}
