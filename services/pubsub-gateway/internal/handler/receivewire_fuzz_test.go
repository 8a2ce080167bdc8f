package handler

import (
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// FuzzReceiveReply: over arbitrary bytes, the wire decoder fails when proto.Unmarshal
// fails, and otherwise gives the same Pub/Sub messages.
func FuzzReceiveReply(f *testing.F) {
	seed, _ := proto.Marshal(&storagev1.ReceiveResponse{Messages: []*storagev1.ReceivedMessage{{
		AckId: "a", Source: "s", SourceSequence: 7, DeliveryAttempt: 2,
		Record: &storagev1.Record{TimestampMs: 5, Value: []byte("xyz"), Headers: []*storagev1.Header{{Key: "k", Value: []byte("v")}, {Key: hdrMessageID, Value: []byte("id")}}},
	}}})
	f.Add(seed)
	f.Add(protowire.AppendTag(nil, 1, protowire.StartGroupType))
	f.Add(protowire.AppendTag(nil, 1, protowire.EndGroupType))
	sub := &subInfo{spec: &pubsubpb.Subscription{DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{MaxDeliveryAttempts: 5}}}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want storagev1.ReceiveResponse
		perr := proto.Unmarshal(b, &want)
		var r receiveReply
		werr := r.UnmarshalBuffers(mem.BufferSlice{mem.SliceBuffer(b)}, nil)
		if (perr == nil) != (werr == nil) {
			t.Fatalf("proto: %v, wire: %v", perr, werr)
		}
		if perr != nil {
			return
		}
		if len(r.msgs) != len(want.Messages) {
			t.Fatalf("%d deliveries, want %d", len(r.msgs), len(want.Messages))
		}
		for i, m := range want.Messages {
			if got, w := r.msgs[i].received(sub), toReceived(m, sub); !proto.Equal(got, w) {
				t.Fatalf("message %d:\n got %v\nwant %v", i, got, w)
			}
		}
	})
}
