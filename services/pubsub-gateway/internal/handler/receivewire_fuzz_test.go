package handler

import (
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// FuzzReceiveReply: over arbitrary bytes, the wire decoder (into a heap copy or a
// pooled one) fails when proto.Unmarshal fails, and otherwise gives the same Pub/Sub
// messages; the stream's own encoding of them is proto's, byte for byte.
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
		// Pooled, from buffers of a size the input picks (1..16 bytes, or halves).
		var split mem.BufferSlice
		if len(b) > 0 && b[0]&0x10 != 0 {
			split = evenSplit(b, max(len(b)/(int(b[0]&0x0f)+1), 1))
		} else {
			split = evenSplit(b, 2)
		}
		pooled := receiveReply{pooled: true}
		defer pooled.free()
		if perr2 := pooled.UnmarshalBuffers(split, grpcx.BufferPool); (perr2 == nil) != (werr == nil) {
			t.Fatalf("heap copy: %v, pooled: %v", werr, perr2)
		}
		if perr != nil {
			return
		}
		if len(pooled.msgs) != len(r.msgs) {
			t.Fatalf("pooled copy: %d deliveries, want %d", len(pooled.msgs), len(r.msgs))
		}
		props := &pubsubpb.StreamingPullResponse_SubscriptionProperties{ExactlyOnceDeliveryEnabled: len(b)%2 == 0}
		checkWireBatch(t, New(Deps{}).Subscriber, sub, props, pooled.msgs)
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
