package handler

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestShareFetchReplyDecodes checks the by-reference decoding of a ShareFetch answer
// split over several transport buffers against proto.Unmarshal: each partition's
// batches a capped view of the one pooled buffer the reply holds; an answer with
// records one by one falls back to proto.Unmarshal and holds no buffer.
func TestShareFetchReplyDecodes(t *testing.T) {
	in := &storagev1.ShareFetchResponse{
		AckResults: []*storagev1.ShareAckResult{{Topic: "t", Partition: 2, Error: storagev1.ShareError_SHARE_ERROR_INVALID_RECORD_STATE, Message: "offset 9"}, {}},
		Partitions: []*storagev1.SharePartitionRecords{
			{Topic: "t", Partition: 0, Batches: bytes.Repeat([]byte{7}, 40000), Acquired: []*storagev1.ShareAcquiredRange{{FirstOffset: 5, LastOffset: 9, DeliveryCount: 1}, {FirstOffset: 12, LastOffset: 12, DeliveryCount: 3}}},
			{Topic: "t", Partition: 1, Error: storagev1.ShareError_SHARE_ERROR_UNKNOWN_PARTITION, Message: "gone"},
			{Topic: "u", Partition: 4, Batches: []byte{1, 2, 3}, Acquired: []*storagev1.ShareAcquiredRange{{FirstOffset: 1 << 40, LastOffset: 1<<40 + 2, DeliveryCount: 2}}},
		},
	}
	split := func(m proto.Message) mem.BufferSlice {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var data mem.BufferSlice
		for len(b) > 0 {
			n := min(len(b), 16384)
			data = append(data, mem.SliceBuffer(b[:n]))
			b = b[n:]
		}
		return data
	}
	var r shareFetchReply
	if err := r.UnmarshalBuffers(split(in), mem.DefaultBufferPool()); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&r.resp, in) || r.buf == nil {
		t.Fatalf("decoded %v (buffer %v), want %v", &r.resp, r.buf, in)
	}
	for i, p := range r.resp.Partitions {
		if cap(p.Batches) != len(p.Batches) {
			t.Fatalf("partition %d: batches capacity %d beyond the field's %d bytes", i, cap(p.Batches), len(p.Batches))
		}
	}
	r.buf.release()

	perRecord := &storagev1.ShareFetchResponse{Partitions: []*storagev1.SharePartitionRecords{{Topic: "t",
		Records: []*storagev1.ShareAcquiredRecord{{DeliveryCount: 1, Record: &storagev1.Record{Sequence: 1, Value: []byte("v")}}}}}}
	var fb shareFetchReply
	if err := fb.UnmarshalBuffers(split(perRecord), mem.DefaultBufferPool()); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&fb.resp, perRecord) || fb.buf != nil {
		t.Fatalf("fallback decoded %v (buffer %v), want %v", &fb.resp, fb.buf, perRecord)
	}
}
