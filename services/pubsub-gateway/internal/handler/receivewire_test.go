package handler

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestReceiveReplyMatchesProto: Receive answers decoded from the wire give the same
// Pub/Sub messages as those decoded by proto, over random records (reserved and
// escaped headers, native records, values absent and empty, unknown fields, the
// answer split over several buffers); a truncated answer and a header key that is not
// UTF-8 are errors, as proto.Unmarshal makes them; decoded into a heap copy or a pooled
// one, from answers cut into random buffers.
func TestReceiveReplyMatchesProto(t *testing.T) {
	rnd := rand.New(rand.NewSource(3))
	subs := []*subInfo{{spec: &pubsubpb.Subscription{}}, {spec: &pubsubpb.Subscription{DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{MaxDeliveryAttempts: 5}}}}
	pick := func(xs ...string) string { return xs[rnd.Intn(len(xs))] }
	for round := 0; round < 200; round++ {
		resp := &storagev1.ReceiveResponse{}
		for i := rnd.Intn(12); i > 0; i-- {
			rec := &storagev1.Record{Sequence: rnd.Int63n(1 << 40), TimestampMs: rnd.Int63n(1 << 42), ProducerId: -1}
			switch rnd.Intn(3) {
			case 0:
			case 1:
				rec.Value = []byte{}
			default:
				rec.Value = make([]byte, rnd.Intn(2000))
				rnd.Read(rec.Value)
			}
			for j := rnd.Intn(6); j > 0; j-- {
				k := pick("a", "b", hdrMessageID, hdrPublishTime, hdrOrderingKey, hdrAttrPrefix+"_x", "_tributary_source", hdrDeadLetterSourceTime)
				v := pick("", "v", "2026-12-01T10:00:00.123456789Z", "12345", "not a time")
				rec.Headers = append(rec.Headers, &storagev1.Header{Key: k, Value: []byte(v)})
			}
			resp.Messages = append(resp.Messages, &storagev1.ReceivedMessage{
				AckId: fmt.Sprintf("%x.%x.%x", rnd.Uint64(), rnd.Intn(1e6), rnd.Intn(1e6)), Record: rec,
				Source: "gcp.t", SourceSequence: rnd.Int63n(1 << 40), DeliveryAttempt: rnd.Int31n(6),
			})
		}
		b, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		// An unknown field at the top: skipped.
		b = protowire.AppendVarint(protowire.AppendTag(b, 99, protowire.VarintType), 7)
		cut := rnd.Intn(len(b) + 1)
		for _, pooled := range []bool{false, true} {
			r := receiveReply{pooled: pooled}
			if err := r.UnmarshalBuffers(randomSplit(rnd, b, cut), grpcx.BufferPool); err != nil {
				t.Fatalf("round %d (pooled %v): %v", round, pooled, err)
			}
			if len(r.msgs) != len(resp.Messages) {
				t.Fatalf("round %d (pooled %v): %d deliveries, want %d", round, pooled, len(r.msgs), len(resp.Messages))
			}
			for i, m := range resp.Messages {
				sub := subs[rnd.Intn(len(subs))]
				want, got := toReceived(m, sub), r.msgs[i].received(sub)
				if !proto.Equal(got, want) {
					t.Fatalf("round %d (pooled %v) message %d:\n got %v\nwant %v", round, pooled, i, got, want)
				}
			}
			r.free()
		}
	}
	whole, _ := proto.Marshal(&storagev1.ReceiveResponse{Messages: []*storagev1.ReceivedMessage{{AckId: "a", Record: &storagev1.Record{Value: []byte("xyz")}}}})
	bad := &storagev1.Header{Key: "ok", Value: []byte("v")}
	hb, _ := proto.Marshal(&storagev1.ReceiveResponse{Messages: []*storagev1.ReceivedMessage{{AckId: "a", Record: &storagev1.Record{Headers: []*storagev1.Header{bad}}}}})
	i := len(hb) - len("okv") - 2 // the key's bytes
	hb[i] = 0xff
	for _, pooled := range []bool{false, true} {
		for _, pieces := range []int{1, 3} {
			r := receiveReply{pooled: pooled}
			if err := r.UnmarshalBuffers(evenSplit(whole[:len(whole)-2], pieces), grpcx.BufferPool); err == nil {
				t.Fatalf("a truncated answer decoded without error (pooled %v, %d pieces)", pooled, pieces)
			}
			if r.buf != nil || r.msgs != nil {
				t.Fatal("a failed decode kept memory or deliveries")
			}
			if err := r.UnmarshalBuffers(evenSplit(hb, pieces), grpcx.BufferPool); err == nil {
				t.Fatalf("a header key that is not UTF-8 decoded without error (%x, pooled %v, %d pieces)", hb, pooled, pieces)
			}
		}
	}
}

// randomSplit is b in a few buffers: cut at cut, and more cuts at random, some
// buffers empty.
func randomSplit(rnd *rand.Rand, b []byte, cut int) mem.BufferSlice {
	cuts := []int{0, cut, len(b)}
	for i := rnd.Intn(6); i > 0; i-- {
		cuts = append(cuts, rnd.Intn(len(b)+1))
	}
	slices.Sort(cuts)
	var out mem.BufferSlice
	for i := 1; i < len(cuts); i++ {
		out = append(out, mem.SliceBuffer(b[cuts[i-1]:cuts[i]]))
	}
	return out
}

// evenSplit is b in n buffers of about the same size.
func evenSplit(b []byte, n int) mem.BufferSlice {
	var out mem.BufferSlice
	for i := range n {
		out = append(out, mem.SliceBuffer(b[len(b)*i/n:len(b)*(i+1)/n]))
	}
	return out
}

// TestReceiveReplyNextBytes: an exact_max_bytes answer that returned nothing because
// its next message does not fit carries next_bytes, which the decoder reads beside the
// messages (and which a later answer without it does not keep).
func TestReceiveReplyNextBytes(t *testing.T) {
	b, err := proto.Marshal(&storagev1.ReceiveResponse{NextBytes: 1_000_123})
	if err != nil {
		t.Fatal(err)
	}
	var r receiveReply
	defer r.free()
	if err := r.UnmarshalBuffers(evenSplit(b, 1), nil); err != nil || r.nextBytes != 1_000_123 || len(r.msgs) != 0 {
		t.Fatalf("decoded %d messages, next_bytes %d, %v; want none, 1000123", len(r.msgs), r.nextBytes, err)
	}
	b, err = proto.Marshal(&storagev1.ReceiveResponse{Messages: []*storagev1.ReceivedMessage{{AckId: "a", Record: &storagev1.Record{Value: []byte("v")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.UnmarshalBuffers(evenSplit(b, 1), nil); err != nil || r.nextBytes != 0 || len(r.msgs) != 1 {
		t.Fatalf("decoded %d messages, next_bytes %d, %v; want one, 0", len(r.msgs), r.nextBytes, err)
	}
}
