package server

import (
	"context"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"go.uber.org/zap/zaptest"
)

// TestShareFetchStateDeletedMidWait: a ShareFetch long poll whose share-partition
// state is deleted under it (DeleteShareGroupOffsets) answers the partition empty
// with no error, as Kafka's ShareFetch does for a partition with nothing to acquire;
// it is not INVALID_RECORD_STATE, which is only for acknowledgements.
func TestShareFetchStateDeletedMidWait(t *testing.T) {
	srv, err := New(Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DataDir: t.TempDir()}, zaptest.NewLogger(t))
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
	defer func() {
		_ = cc.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	sc, shc := storagev1.NewStorageServiceClient(cc), storagev1.NewShareServiceClient(cc)
	if _, err := sc.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: channel.KafkaPartition("orders", 0)}); err != nil {
		t.Fatal(err)
	}
	part := []*storagev1.SharePartitionRef{{Topic: "orders", Partition: 0}}
	type answer struct {
		resp *storagev1.ShareFetchResponse
		err  error
	}
	fetch := &storagev1.ShareFetchRequest{GroupId: "g", MemberId: "m", MaxRecords: 10, Partitions: part}
	if _, err := shc.ShareFetch(ctx, fetch); err != nil { // creates the state
		t.Fatal(err)
	}
	got := make(chan answer, 1)
	go func() {
		r, err := shc.ShareFetch(ctx, &storagev1.ShareFetchRequest{GroupId: "g", MemberId: "m", MaxRecords: 10, WaitMs: 5000, Partitions: part})
		got <- answer{r, err}
	}()
	time.Sleep(300 * time.Millisecond) // the long poll is waiting
	start := time.Now()
	d, err := shc.DeleteSharePartitions(ctx, &storagev1.DeleteSharePartitionsRequest{GroupId: "g", Partitions: part})
	if err != nil || d.Partitions[0].Error != storagev1.ShareError_SHARE_ERROR_UNSPECIFIED {
		t.Fatalf("delete: %v %v", err, d)
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	if p := a.resp.Partitions[0]; p.Error != storagev1.ShareError_SHARE_ERROR_UNSPECIFIED || len(p.Records) != 0 {
		t.Fatalf("fetch cut short by delete after %v: error %v (%s), %d records; want empty, no error", time.Since(start), p.Error, p.Message, len(p.Records))
	}
}
