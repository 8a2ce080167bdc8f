package handler

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// FuzzFetchReplyMatchesProtoUnmarshal: for any bytes (truncated, garbage, unknown
// fields, bad UTF-8), the by-reference decoding fails exactly when proto.Unmarshal
// does and otherwise yields the same message.
func FuzzFetchReplyMatchesProtoUnmarshal(f *testing.F) {
	b, _ := proto.Marshal(&storagev1.FetchResponse{Results: []*storagev1.FetchChannelResult{{Channel: "a", Error: 3, HighWatermark: 5, LastStableSequence: 5, LogStartSequence: 1, Batches: []byte("xyz")}, {Channel: "b"}}})
	f.Add(b)
	f.Add([]byte{0x0a, 0x05, 0x32, 0x10})
	f.Fuzz(func(t *testing.T, b []byte) {
		var want storagev1.FetchResponse
		werr := proto.Unmarshal(b, &want)
		r := &fetchReply{}
		gerr := r.UnmarshalBuffers(mem.BufferSlice{mem.SliceBuffer(b)}, nil)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("err %v, proto.Unmarshal %v", gerr, werr)
		}
		if werr == nil && !proto.Equal(&want, &r.resp) {
			t.Fatalf("got %v want %v", &r.resp, &want)
		}
	})
}
