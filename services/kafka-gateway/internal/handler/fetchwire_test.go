package handler

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/proto/storagewire"
)

// TestFetchReplyDecodes checks the by-reference decoding against proto.Unmarshal for a
// message split over several transport buffers, with each result's batches capped at
// the field so an append to one cannot overwrite the next.
func TestFetchReplyDecodes(t *testing.T) {
	in := &storagev1.FetchResponse{Results: []*storagev1.FetchChannelResult{
		{Channel: "kafka.a", HighWatermark: 10, LastStableSequence: 9, LogStartSequence: 1, Batches: bytes.Repeat([]byte{7}, 40000)},
		{Channel: "kafka.b", Error: storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND, HighWatermark: -1, LogStartSequence: -5},
		{},
		{Channel: "kafka.c~3", Batches: []byte{1, 2, 3}},
		{Channel: "kafka.d", LastStableSequence: 4, Batches: []byte{4}, AbortedTransactions: []*storagev1.AbortedTransaction{
			{ProducerId: 3, FirstSequence: 2}, {}, {ProducerId: 1 << 40, FirstSequence: 1 << 50}}},
	}}
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !storagewire.DecodeFetchResponse(b, &storagev1.FetchResponse{}) {
		t.Fatal("the by-reference decoder refused a response it should handle (aborted_transactions)")
	}
	var data mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 16384)
		data = append(data, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	var r fetchReply
	if err := r.UnmarshalBuffers(data, mem.DefaultBufferPool()); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&r.resp, in) {
		t.Fatalf("decoded %v, want %v", &r.resp, in)
	}
	for i, res := range r.resp.Results {
		if cap(res.Batches) != len(res.Batches) {
			t.Fatalf("result %d: batches capacity %d beyond the field's %d bytes", i, cap(res.Batches), len(res.Batches))
		}
	}
}

// TestFetchReplyFallsBack checks that input outside the handled shape (an unknown
// field, a wrong wire type, bad UTF-8, truncation) decodes or fails exactly as
// proto.Unmarshal does.
func TestFetchReplyFallsBack(t *testing.T) {
	result := func(fields ...[]byte) []byte {
		var r []byte
		for _, f := range fields {
			r = append(r, f...)
		}
		out := protowire.AppendTag(nil, 1, protowire.BytesType)
		return protowire.AppendBytes(out, r)
	}
	field := func(num protowire.Number, typ protowire.Type, v []byte) []byte {
		return append(protowire.AppendTag(nil, num, typ), v...)
	}
	str := func(s string) []byte { return protowire.AppendString(nil, s) }
	cases := map[string][]byte{
		"unknown field":   result(field(1, protowire.BytesType, str("kafka.x")), field(9, protowire.VarintType, protowire.AppendVarint(nil, 3))),
		"wrong wire type": result(field(3, protowire.BytesType, str("x"))),
		"bad utf-8":       result(field(1, protowire.BytesType, str("\xff"))),
		"truncated":       result(field(6, protowire.BytesType, str("abc")))[:5],
		"top-level field": field(2, protowire.VarintType, protowire.AppendVarint(nil, 1)),
	}
	for name, b := range cases {
		var want storagev1.FetchResponse
		wantErr := proto.Unmarshal(b, &want)
		var r fetchReply
		err := r.UnmarshalBuffers(mem.BufferSlice{mem.SliceBuffer(b)}, mem.DefaultBufferPool())
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%s: error %v, proto.Unmarshal %v", name, err, wantErr)
		}
		if err == nil && !proto.Equal(&r.resp, &want) {
			t.Fatalf("%s: decoded %v, proto.Unmarshal %v", name, &r.resp, &want)
		}
	}
}
