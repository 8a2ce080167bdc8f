package server

import (
	"testing"
	"time"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestShareFetchStateDeletedMidWait: a ShareFetch long poll whose share-partition
// state is deleted under it (DeleteShareGroupOffsets) answers the partition empty
// with no error, as Kafka's ShareFetch does for a partition with nothing to acquire;
// it is not INVALID_RECORD_STATE, which is only for acknowledgements.
func TestShareFetchStateDeletedMidWait(t *testing.T) {
	ctx, sc, shc := startShareServer(t)
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

// TestShareAcknowledgeStateDeleted: acknowledgements for a share partition whose state
// is gone (DeleteShareGroupOffsets, or never created) answer UNKNOWN_PARTITION, as
// Kafka's SharePartitionManager answers UNKNOWN_TOPIC_OR_PARTITION for a partition it
// holds no share partition for; INVALID_RECORD_STATE is only for offsets the member
// does not hold in existing state. Alone (ShareAcknowledge) and piggybacked
// (ShareFetch), whose fetch then starts the state afresh.
func TestShareAcknowledgeStateDeleted(t *testing.T) {
	ctx, sc, shc := startShareServer(t)
	for _, p := range []int32{0, 1} {
		if _, err := sc.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: channel.KafkaPartition("orders", p)}); err != nil {
			t.Fatal(err)
		}
	}
	p0 := []*storagev1.SharePartitionRef{{Topic: "orders", Partition: 0}}
	if _, err := shc.ShareFetch(ctx, &storagev1.ShareFetchRequest{GroupId: "g", MemberId: "m", MaxRecords: 10, Partitions: p0,
		AutoOffsetReset: storagev1.ShareAutoOffsetReset_SHARE_AUTO_OFFSET_RESET_EARLIEST}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Append(ctx, &storagev1.AppendRequest{Channel: channel.KafkaPartition("orders", 0), Records: []*storagev1.AppendRecord{{Value: []byte("a")}}}); err != nil {
		t.Fatal(err)
	}
	f, err := shc.ShareFetch(ctx, &storagev1.ShareFetchRequest{GroupId: "g", MemberId: "m", MaxRecords: 10, WaitMs: 5000, Partitions: p0})
	if err != nil || len(f.Partitions[0].Records) != 1 {
		t.Fatalf("fetch: %v %v", err, f)
	}
	// Existing state, an offset the member does not hold: INVALID_RECORD_STATE.
	accept := func(p int32, off int64) []*storagev1.SharePartitionAcks {
		return []*storagev1.SharePartitionAcks{{Topic: "orders", Partition: p, Batches: []*storagev1.ShareAckBatch{{FirstOffset: off, LastOffset: off,
			Types: []storagev1.ShareAcknowledgeType{storagev1.ShareAcknowledgeType_SHARE_ACKNOWLEDGE_TYPE_ACCEPT}}}}}
	}
	a, err := shc.ShareAcknowledge(ctx, &storagev1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "other", Acknowledgements: accept(0, 0)})
	if err != nil || a.Results[0].Error != storagev1.ShareError_SHARE_ERROR_INVALID_RECORD_STATE {
		t.Fatalf("another member's record: %v %v", err, a)
	}
	if d, err := shc.DeleteSharePartitions(ctx, &storagev1.DeleteSharePartitionsRequest{GroupId: "g", Partitions: p0}); err != nil || d.Partitions[0].Error != 0 {
		t.Fatalf("delete: %v %v", err, d)
	}
	// The member's record, its state deleted since; and a partition never started.
	for _, p := range []int32{0, 1} {
		a, err := shc.ShareAcknowledge(ctx, &storagev1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", Acknowledgements: accept(p, 0)})
		if err != nil || len(a.Results) != 1 || a.Results[0].Error != storagev1.ShareError_SHARE_ERROR_UNKNOWN_PARTITION {
			t.Fatalf("ShareAcknowledge on partition %d without state: %v %v, want UNKNOWN_PARTITION", p, err, a)
		}
	}
	f, err = shc.ShareFetch(ctx, &storagev1.ShareFetchRequest{GroupId: "g", MemberId: "m", MaxRecords: 10, WaitMs: 5000, Partitions: p0, Acknowledgements: accept(0, 0),
		AutoOffsetReset: storagev1.ShareAutoOffsetReset_SHARE_AUTO_OFFSET_RESET_EARLIEST})
	if err != nil || len(f.AckResults) != 1 || f.AckResults[0].Error != storagev1.ShareError_SHARE_ERROR_UNKNOWN_PARTITION {
		t.Fatalf("piggybacked ack without state: %v %v, want UNKNOWN_PARTITION", err, f)
	}
	if p := f.Partitions[0]; p.Error != 0 || len(p.Records) != 1 || p.Records[0].DeliveryCount != 1 {
		t.Fatalf("fetch after the delete: %v, want the record afresh (delivery count 1)", p)
	}
}

// TestSharePartitionGoesWithTopic: deleting a Kafka partition's log (DeleteTopics)
// deletes every group's share state of that partition, as Kafka's share coordinator
// drops a deleted topic's share state; a topic re-created with the same name starts
// its share partitions afresh (share.auto.offset.reset, delivery count 1) instead of
// inheriting the old topic's start offset and in-flight records.
func TestSharePartitionGoesWithTopic(t *testing.T) {
	ctx, sc, shc := startShareServer(t)
	create := func(topic string, p int32) {
		t.Helper()
		if _, err := sc.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: channel.KafkaPartition(topic, p)}); err != nil {
			t.Fatal(err)
		}
	}
	appendValues := func(topic string, p int32, vs ...string) {
		t.Helper()
		var recs []*storagev1.AppendRecord
		for _, v := range vs {
			recs = append(recs, &storagev1.AppendRecord{Value: []byte(v)})
		}
		if _, err := sc.Append(ctx, &storagev1.AppendRequest{Channel: channel.KafkaPartition(topic, p), Records: recs}); err != nil {
			t.Fatal(err)
		}
	}
	fetch := func(group string, p int32) *storagev1.SharePartitionRecords {
		t.Helper()
		f, err := shc.ShareFetch(ctx, &storagev1.ShareFetchRequest{GroupId: group, MemberId: "m", MaxRecords: 10, WaitMs: 3000,
			Partitions:      []*storagev1.SharePartitionRef{{Topic: "orders", Partition: p}},
			AutoOffsetReset: storagev1.ShareAutoOffsetReset_SHARE_AUTO_OFFSET_RESET_EARLIEST})
		if err != nil {
			t.Fatal(err)
		}
		return f.Partitions[0]
	}
	for _, p := range []int32{0, 1} {
		create("orders", p)
		create("other", p)
	}
	appendValues("orders", 0, "old0", "old1", "old2")
	appendValues("orders", 1, "keep")
	for _, g := range []string{"g1", "g2"} {
		if r := fetch(g, 0); len(r.Records) != 3 { // held, in flight
			t.Fatalf("%s before the delete: %v", g, r)
		}
	}
	if r := fetch("g1", 1); len(r.Records) != 1 {
		t.Fatalf("partition 1: %v", r)
	}
	if _, err := sc.DeleteChannel(ctx, &storagev1.DeleteChannelRequest{Name: channel.KafkaPartition("orders", 0)}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"g1", "g2"} {
		l, err := shc.ListSharePartitions(ctx, &storagev1.ListSharePartitionsRequest{GroupId: g})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range l.GetPartitions() {
			if p.GetTopic() == "orders" && p.GetPartition() == 0 {
				t.Fatalf("group %s still has share state of the deleted partition: %v", g, l)
			}
		}
	}
	// The other partition's share state stays (its log was not deleted).
	if l, err := shc.ListSharePartitions(ctx, &storagev1.ListSharePartitionsRequest{GroupId: "g1"}); err != nil || len(l.GetPartitions()) != 1 {
		t.Fatalf("g1's share state after deleting partition 0: %v %v, want partition 1 only", l, err)
	}
	// Re-created: new records from offset 0, each delivered once, none of the old.
	create("orders", 0)
	appendValues("orders", 0, "new0")
	for _, g := range []string{"g1", "g2"} {
		r := fetch(g, 0)
		if r.Error != 0 || len(r.Records) != 1 || string(r.Records[0].Record.Value) != "new0" || r.Records[0].Record.Sequence != 1 || r.Records[0].DeliveryCount != 1 {
			t.Fatalf("%s after the topic was re-created: %v, want new0 at offset 0, delivery count 1", g, r)
		}
	}
}
