package server

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/storage-core/internal/queue"
	"github.com/tributary/tributary/services/storage-core/internal/store"
)

// receiveProto is the ReceiveResponse Receive builds outside gRPC.
func receiveProto(ds []queue.Delivery) *storagev1.ReceiveResponse {
	resp := &storagev1.ReceiveResponse{}
	for _, d := range ds {
		resp.Messages = append(resp.Messages, &storagev1.ReceivedMessage{AckId: d.AckID, Record: toProtoRecords([]store.Record{d.Record})[0], Source: d.Source, SourceSequence: d.SourceSeq, DeliveryAttempt: d.Attempt})
	}
	return resp
}

func randomBytes(rnd *rand.Rand) []byte {
	switch rnd.Intn(4) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, rnd.Intn(300))
	rnd.Read(b)
	return b
}

// TestReceiveWireMatchesProto: the hand-written encoding is byte for byte what
// proto.Marshal writes, for records with and without keys, values and headers, zero
// and negative fields, large sizes; and decodes back to the same messages.
func TestReceiveWireMatchesProto(t *testing.T) {
	rnd := rand.New(rand.NewSource(7))
	for round := 0; round < 300; round++ {
		var ds []queue.Delivery
		for i := rnd.Intn(20); i > 0; i-- {
			r := store.Record{
				Offset: rnd.Int63n(1 << uint(rnd.Intn(62))), Timestamp: rnd.Int63() - rnd.Int63(),
				Key: randomBytes(rnd), Value: randomBytes(rnd),
				ProducerID: []int64{-1, 0, rnd.Int63()}[rnd.Intn(3)], ProducerEpoch: int16([]int{-1, 0, rnd.Intn(32767)}[rnd.Intn(3)]),
				Transactional: rnd.Intn(2) == 0, Control: rnd.Intn(5) == 0,
			}
			for j := rnd.Intn(4); j > 0; j-- {
				r.Headers = append(r.Headers, store.Header{Key: []string{"", "k", "_pubsub_message_id"}[rnd.Intn(3)], Value: randomBytes(rnd)})
			}
			ds = append(ds, queue.Delivery{
				AckID: []string{"", fmt.Sprintf("%x-%d", rnd.Uint64(), rnd.Intn(9))}[rnd.Intn(2)], Record: r,
				Source: []string{"", "gcp.t"}[rnd.Intn(2)], SourceSeq: []int64{0, rnd.Int63()}[rnd.Intn(2)],
				Attempt: []int32{0, 1, rnd.Int31()}[rnd.Intn(3)],
			})
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(receiveProto(ds))
		if err != nil {
			t.Fatal(err)
		}
		bufs, err := receiveWire(ds).MarshalBuffers(grpcx.BufferPool)
		if err != nil {
			t.Fatal(err)
		}
		got := bufs.Materialize()
		bufs.Free()
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: hand encoding differs from proto.Marshal\n got %x\nwant %x", round, got, want)
		}
	}
	if _, err := receiveWire([]queue.Delivery{{Record: store.Record{Headers: []store.Header{{Key: "\xff"}}}}}).MarshalBuffers(grpcx.BufferPool); err == nil {
		t.Fatal("a header key that is not UTF-8 was encoded; proto.Marshal refuses it")
	}
}
