package server

import (
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestShareFetchAsBatch: a ShareFetch with stored_batches answers with the
// partition log's own frames, cut down to the acquired records (a valid batch, CRC
// checked by kgo's decoder, offsets and values as produced), and the acquired ranges
// with their delivery counts; a released record comes again in its frame with
// delivery count 2. Without stored_batches the records come one by one.
func TestShareFetchAsBatch(t *testing.T) {
	ctx, sc, shc := startShareServer(t)
	ch := channel.KafkaPartition("orders", 0)
	if _, err := sc.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: ch}); err != nil {
		t.Fatal(err)
	}
	part := []*storagev1.SharePartitionRef{{Topic: "orders", Partition: 0}}
	wait := int32(0)
	fetch := func(member string, maxRecords int32, stored bool) *storagev1.SharePartitionRecords {
		t.Helper()
		r, err := shc.ShareFetch(ctx, &storagev1.ShareFetchRequest{GroupId: "g", MemberId: member, MaxRecords: maxRecords,
			WaitMs: wait, Partitions: part, AsBatch: stored,
			AutoOffsetReset: storagev1.ShareAutoOffsetReset_SHARE_AUTO_OFFSET_RESET_EARLIEST})
		if err != nil {
			t.Fatal(err)
		}
		p := r.Partitions[0]
		if p.Error != storagev1.ShareError_SHARE_ERROR_UNSPECIFIED {
			t.Fatalf("fetch: %v %s", p.Error, p.Message)
		}
		return p
	}
	// decode returns "offset=value" of every record of the batches, as kgo delivers
	// them to a consumer (before its acquired-range filter).
	decode := func(b []byte) []string {
		t.Helper()
		fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: "orders", Partition: 0},
			&kmsg.FetchResponseTopicPartition{RecordBatches: b, HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1}, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			t.Fatalf("decode: %v", fp.Err)
		}
		var out []string
		for _, r := range fp.Records {
			out = append(out, fmt.Sprintf("%d=%s", r.Offset, r.Value))
		}
		return out
	}
	ranges := func(p *storagev1.SharePartitionRecords) []string {
		var out []string
		for _, a := range p.Acquired {
			out = append(out, fmt.Sprintf("%d-%d/%d", a.FirstOffset, a.LastOffset, a.DeliveryCount))
		}
		return out
	}
	fetch("m0", 1, true) // starts the state at the log start, nothing there yet
	wait = 5000

	// Offsets 0..9 in one frame, 10..14 in another, appended at once.
	a := kafkaBatch(t, -1, -1, -1, "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9")
	b := kafkaBatch(t, -1, -1, -1, "b0", "b1", "b2", "b3", "b4")
	appendRaw(t, sc, ch, append(a, b...))

	want := func(p *storagev1.SharePartitionRecords, recs, acquired []string) {
		t.Helper()
		if len(p.Records) != 0 {
			t.Fatalf("%d records one by one beside the stored batches", len(p.Records))
		}
		if got := decode(p.Batches); !slices.Equal(got, recs) {
			t.Errorf("batches hold %v, want %v", got, recs)
		}
		if got := ranges(p); !slices.Equal(got, acquired) {
			t.Errorf("acquired %v, want %v", got, acquired)
		}
	}
	want(fetch("m1", 4, true), []string{"0=a0", "1=a1", "2=a2", "3=a3"}, []string{"0-3/1"})
	want(fetch("m2", 8, true), []string{"4=a4", "5=a5", "6=a6", "7=a7", "8=a8", "9=a9", "10=b0", "11=b1"}, []string{"4-11/1"})

	// m1 releases offset 2: it comes again (delivery count 2) before 12..14.
	ack, err := shc.ShareAcknowledge(ctx, &storagev1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m1",
		Acknowledgements: []*storagev1.SharePartitionAcks{{Topic: "orders", Partition: 0, Batches: []*storagev1.ShareAckBatch{
			{FirstOffset: 2, LastOffset: 2, Types: []storagev1.ShareAcknowledgeType{storagev1.ShareAcknowledgeType_SHARE_ACKNOWLEDGE_TYPE_RELEASE}}}}}})
	if err != nil || ack.Results[0].Error != storagev1.ShareError_SHARE_ERROR_UNSPECIFIED {
		t.Fatalf("release: %v %v", err, ack)
	}
	want(fetch("m3", 10, true), []string{"2=a2", "12=b2", "13=b3", "14=b4"}, []string{"2-2/2", "12-14/1"})

	// Without stored_batches: records one by one. m3 releases what it holds first.
	ack, err = shc.ShareAcknowledge(ctx, &storagev1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m3",
		Acknowledgements: []*storagev1.SharePartitionAcks{{Topic: "orders", Partition: 0, Batches: []*storagev1.ShareAckBatch{
			{FirstOffset: 12, LastOffset: 14, Types: []storagev1.ShareAcknowledgeType{storagev1.ShareAcknowledgeType_SHARE_ACKNOWLEDGE_TYPE_RELEASE}}}}}})
	if err != nil || ack.Results[0].Error != storagev1.ShareError_SHARE_ERROR_UNSPECIFIED {
		t.Fatalf("release: %v %v", err, ack)
	}
	p := fetch("m4", 10, false)
	var got []string
	for _, r := range p.Records {
		got = append(got, fmt.Sprintf("%d=%s/%d", r.Record.Sequence-1, r.Record.Value, r.DeliveryCount))
	}
	if want := []string{"12=b2/2", "13=b3/2", "14=b4/2"}; len(p.Batches) != 0 || !slices.Equal(got, want) {
		t.Errorf("records one by one: %v (%d bytes of batches), want %v", got, len(p.Batches), want)
	}
}
