package handler

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// benchReceiveAnswer is a Receive answer like the StreamingPull benchmark's: n 1 KiB
// messages published in batches of 100 (one publish time each), split into 16 KiB
// buffers as HTTP/2 frames arrive.
func benchReceiveAnswer(b testing.TB, n int) mem.BufferSlice {
	resp := &storagev1.ReceiveResponse{}
	for i := range n {
		pt := time.Unix(1_800_000_000+int64(i/100), int64(i/100)*1_234_567).UTC().Format(time.RFC3339Nano)
		resp.Messages = append(resp.Messages, &storagev1.ReceivedMessage{
			AckId: fmt.Sprintf("%x.%x.%x", uint64(0x1234567890abcdef), 1000+i, uint64(1_800_000_000_000_000_000)+uint64(i)),
			Record: &storagev1.Record{Sequence: int64(i + 1), TimestampMs: 1_800_000_000_000, Value: make([]byte, 1024), Headers: []*storagev1.Header{
				{Key: hdrMessageID, Value: fmt.Appendf(nil, "%d", 17_000_000+i)},
				{Key: hdrPublishTime, Value: []byte(pt)},
			}},
			Source: "gcp.t", SourceSequence: int64(i + 1), DeliveryAttempt: 1,
		})
	}
	whole, err := proto.Marshal(resp)
	if err != nil {
		b.Fatal(err)
	}
	var bs mem.BufferSlice
	for len(whole) > 0 {
		k := min(len(whole), 16<<10)
		bs = append(bs, mem.SliceBuffer(whole[:k]))
		whole = whole[k:]
	}
	return bs
}

// BenchmarkReceiveDecode: decoding a 1000-message Receive answer into deliveries,
// copied into a fresh slice (Pull, push) or a pooled buffer (StreamingPull).
func BenchmarkReceiveDecode(b *testing.B) {
	data := benchReceiveAnswer(b, 1000)
	for _, pooled := range []bool{false, true} {
		b.Run(fmt.Sprintf("pooled=%v", pooled), func(b *testing.B) {
			b.SetBytes(int64(data.Len()))
			b.ReportAllocs()
			for b.Loop() {
				r := receiveReply{pooled: pooled}
				if err := r.UnmarshalBuffers(data, grpcx.BufferPool); err != nil {
					b.Fatal(err)
				}
				r.free()
			}
		})
	}
}

// BenchmarkStreamBatchProto: a 1000-message Receive answer to a marshalled
// StreamingPullResponse through proto messages (decode, received, proto.Size for the
// window, codec marshal), as the stream did before it encoded its responses.
func BenchmarkStreamBatchProto(b *testing.B) {
	data := benchReceiveAnswer(b, 1000)
	sub := &subInfo{spec: &pubsubpb.Subscription{}}
	props := &pubsubpb.StreamingPullResponse_SubscriptionProperties{}
	b.SetBytes(int64(data.Len()))
	b.ReportAllocs()
	for b.Loop() {
		var r receiveReply
		if err := r.UnmarshalBuffers(data, grpcx.BufferPool); err != nil {
			b.Fatal(err)
		}
		out := &pubsubpb.StreamingPullResponse{ReceivedMessages: make([]*pubsubpb.ReceivedMessage, 0, len(r.msgs)), SubscriptionProperties: props}
		var size int64
		for i := range r.msgs {
			rm := r.msgs[i].received(sub)
			out.ReceivedMessages = append(out.ReceivedMessages, rm)
			size += int64(proto.Size(rm.GetMessage()))
		}
		enc, err := grpcx.Codec.Marshal(out)
		if err != nil {
			b.Fatal(err)
		}
		enc.Free()
	}
}

// BenchmarkLeaseBook: a 1000-message batch tracked by a stream, then, as the Go
// client does, its receipt modack (extend) and its acks (done) through the replica's
// stream book, in batches of 250 in a shuffled order, with 20000 other leases
// outstanding; streams is how many streams of the queue the replica has (the batch is
// the last one's).
func BenchmarkLeaseBook(b *testing.B) {
	for _, streams := range []int{1, 4} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			h := New(Deps{}).Subscriber
			var ss []*stream
			for range streams {
				s := &stream{h: h, queue: "gcp.sub.s", maxMsgs: 1 << 40, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
				h.streams.add(s)
				ss = append(ss, s)
			}
			s := ss[len(ss)-1]
			// A window's worth of other leases outstanding, as in a busy stream.
			for i := range 20_000 {
				s.track(fmt.Sprintf("%x.%x.%x", uint64(0xfedcba9876543210), i, i), 1100, time.Now().Add(time.Hour))
			}
			ids := make([]string, 1000)
			sizes := make([]int64, len(ids))
			for i := range ids {
				ids[i] = fmt.Sprintf("%x.%x.%x", uint64(0x1234567890abcdef), 1000+i, uint64(1_800_000_000_000_000_000)+uint64(i))
				sizes[i] = 1100
			}
			shuffled := slices.Clone(ids)
			rand.New(rand.NewSource(1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			until := time.Now().Add(time.Minute)
			b.ReportAllocs()
			for b.Loop() {
				s.trackAll(ids, sizes, until, 0, 0)
				for i := 0; i < len(shuffled); i += 250 {
					h.streams.extend("gcp.sub.s", shuffled[i:i+250], until)
				}
				for i := 0; i < len(shuffled); i += 250 {
					h.streams.done("gcp.sub.s", shuffled[i:i+250])
				}
			}
			if s.count != 20_000 {
				b.Fatalf("%d leases left", s.count)
			}
		})
	}
}
