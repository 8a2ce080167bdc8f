package handler

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/grpcx"
)

// protoBatch is the StreamingPullResponse the stream built from ds with proto
// messages, marshalled deterministically, and its messages' flow-control sizes.
func protoBatch(t testing.TB, h *Subscriber, sub *subInfo, props *pubsubpb.StreamingPullResponse_SubscriptionProperties, ds []delivery) ([]byte, []int64, error) {
	t.Helper()
	s := &stream{h: h, sub: sub, props: props}
	b, sizes := s.batch(context.Background(), s.enc, ds)
	b.out.SubscriptionProperties = props
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(b.out)
	return out, sizes, err
}

// wireBatch is the same through the stream's encoder.
func wireBatch(t testing.TB, h *Subscriber, sub *subInfo, props *pubsubpb.StreamingPullResponse_SubscriptionProperties, ds []delivery) ([]byte, []int64, error) {
	t.Helper()
	s := &stream{h: h, sub: sub, props: props, enc: &streamEncoder{h: h, sub: sub, props: props}}
	b, sizes := s.batch(context.Background(), s.enc, ds)
	if b.err != nil {
		return nil, nil, b.err
	}
	defer b.free()
	bs, err := b.wire.MarshalBuffers(grpcx.BufferPool)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Free()
	out := bs.Materialize()
	var resp pubsubpb.StreamingPullResponse
	if err := proto.Unmarshal(out, &resp); err != nil {
		t.Fatalf("encoded batch does not unmarshal: %v", err)
	}
	var total int64
	for _, rm := range resp.GetReceivedMessages() {
		total += int64(proto.Size(rm.GetMessage()))
	}
	if total != b.bytes {
		t.Fatalf("batch bytes %d, its messages' sizes add up to %d", b.bytes, total)
	}
	return out, sizes, nil
}

// checkWireBatch: the encoder's bytes and sizes equal proto's for ds, and it fails
// exactly when proto does.
func checkWireBatch(t testing.TB, h *Subscriber, sub *subInfo, props *pubsubpb.StreamingPullResponse_SubscriptionProperties, ds []delivery) {
	t.Helper()
	want, wantSizes, perr := protoBatch(t, h, sub, props, ds)
	got, gotSizes, werr := wireBatch(t, h, sub, props, ds)
	if (perr == nil) != (werr == nil) {
		t.Fatalf("proto: %v, wire: %v", perr, werr)
	}
	if perr != nil {
		return
	}
	if !bytes.Equal(got, want) {
		var g pubsubpb.StreamingPullResponse
		gerr := proto.Unmarshal(got, &g)
		t.Fatalf("wire encoding differs from proto.Marshal:\n got %x (%v %v)\nwant %x", got, gerr, &g, want)
	}
	if fmt.Sprint(gotSizes) != fmt.Sprint(wantSizes) {
		t.Fatalf("sizes %v, want %v", gotSizes, wantSizes)
	}
}

// TestStreamWireMatchesProto: batches the stream encodes itself are byte for byte the
// deterministic proto.Marshal of the StreamingPullResponse built from proto messages,
// with the same flow-control sizes, over random deliveries: attributes plain, escaped
// and repeated, reserved headers repeated or malformed, dead-letter source times,
// ordering keys, schema attributes (built by proto), values absent and empty, values
// that are not UTF-8 (both give them with U+FFFD, never an error), every subscription
// property, with and without a dead-letter policy; and the encoder's scratch reused
// from batch to batch.
func TestStreamWireMatchesProto(t *testing.T) {
	rnd := rand.New(rand.NewSource(5))
	h := New(Deps{}).Subscriber
	pick := func(xs ...string) string { return xs[rnd.Intn(len(xs))] }
	for round := 0; round < 500; round++ {
		sub := &subInfo{spec: &pubsubpb.Subscription{}}
		if rnd.Intn(2) == 0 {
			sub.spec.DeadLetterPolicy = &pubsubpb.DeadLetterPolicy{MaxDeliveryAttempts: 5}
		}
		props := &pubsubpb.StreamingPullResponse_SubscriptionProperties{ExactlyOnceDeliveryEnabled: rnd.Intn(2) == 0, MessageOrderingEnabled: rnd.Intn(2) == 0}
		var ds []delivery
		for i := rnd.Intn(8) + 1; i > 0; i-- {
			d := delivery{ackID: fmt.Sprintf("%x.%x.%x", rnd.Uint64(), rnd.Intn(1e6), rnd.Intn(1e6)), attempt: rnd.Int31n(4) - 1, sourceSeq: rnd.Int63n(1<<40) - 5, ts: rnd.Int63n(1<<42) - 1000}
			switch rnd.Intn(3) {
			case 0:
			case 1:
				d.value = []byte{}
			default:
				d.value = make([]byte, rnd.Intn(300))
				rnd.Read(d.value)
			}
			for j := rnd.Intn(7); j > 0; j-- {
				k := pick("a", "b", "", hdrMessageID, hdrPublishTime, hdrOrderingKey, hdrAttrPrefix+"a", hdrAttrPrefix+"_x", "_tributary_source", hdrDeadLetterSourceTime, deadLetterSourceTime, attrSchemaName)
				v := pick("", "v", "2026-12-01T10:00:00.123456789Z", "2026-12-01T10:00:00Z", "1970-01-01T00:00:00Z", "1969-12-31T23:59:59.5Z", "2026-12-01T11:00:00+01:00", "12345", "-5", "not a time", "\xff\xfe", "x")
				d.headers = append(d.headers, storedHeader{key: k, value: []byte(v)})
			}
			ds = append(ds, d)
		}
		checkWireBatch(t, h, sub, props, ds)
		if _, _, err := protoBatch(t, h, sub, props, ds); err != nil {
			t.Fatalf("round %d: the batch cannot be marshalled: %v", round, err)
		}
	}
}

// TestDeliveryNotUTF8: a record appended natively to gcp.<t> may carry header values
// that are not UTF-8. An attribute value, message id or ordering key made of them is
// delivered with U+FFFD for each run of invalid bytes, by Pull and by the stream encoder
// alike: a message proto cannot marshal would fail every Pull or stream that leased
// it (INTERNAL), with the valid messages of its batch, and the subscription would
// deliver nothing while it stays.
func TestDeliveryNotUTF8(t *testing.T) {
	h := New(Deps{}).Subscriber
	sub := &subInfo{spec: &pubsubpb.Subscription{}}
	props := &pubsubpb.StreamingPullResponse_SubscriptionProperties{}
	ds := []delivery{
		{ackID: "a.1.1", sourceSeq: 1, value: []byte("ok"), headers: []storedHeader{{key: "k", value: []byte("v")}}},
		{ackID: "a.2.1", sourceSeq: 2, value: []byte("bad"), headers: []storedHeader{
			{key: "k", value: []byte("v\xff")},
			{key: hdrAttrPrefix + "_e", value: []byte("\xc3")},
			{key: hdrMessageID, value: []byte("\xfe\xff1")},
			{key: hdrOrderingKey, value: []byte("o\x80")},
		}},
	}
	checkWireBatch(t, h, sub, props, ds)
	out, _, err := protoBatch(t, h, sub, props, ds)
	if err != nil {
		t.Fatalf("a batch with header values that are not UTF-8 cannot be marshalled: %v", err)
	}
	var resp pubsubpb.StreamingPullResponse
	if err := proto.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	m := resp.GetReceivedMessages()[1].GetMessage()
	if got := m.GetAttributes()["k"]; got != "v\uFFFD" {
		t.Errorf("attribute k = %q, want %q", got, "v\uFFFD")
	}
	if got := m.GetAttributes()["_e"]; got != "\uFFFD" {
		t.Errorf("attribute _e = %q, want %q", got, "\uFFFD")
	}
	if got := m.GetMessageId(); got != "\uFFFD1" {
		t.Errorf("message id = %q", got)
	}
	if got := m.GetOrderingKey(); got != "o\uFFFD" {
		t.Errorf("ordering key = %q", got)
	}
	// Pull builds the same message.
	rm := ds[1].received(sub)
	if _, err := proto.Marshal(rm); err != nil {
		t.Fatalf("Pull's message cannot be marshalled: %v", err)
	}
	if !proto.Equal(rm.GetMessage(), m) {
		t.Errorf("Pull's message %v, the stream's %v", rm.GetMessage(), m)
	}
}

// TestStreamWireFromReceive: a Receive answer decoded into a pooled buffer, encoded,
// and the buffer freed and overwritten: the response keeps its bytes (it refers to
// nothing of the answer) and equals proto's.
func TestStreamWireFromReceive(t *testing.T) {
	data := benchReceiveAnswer(t, 300)
	sub := &subInfo{spec: &pubsubpb.Subscription{}}
	props := &pubsubpb.StreamingPullResponse_SubscriptionProperties{}
	h := New(Deps{}).Subscriber
	var plain receiveReply
	if err := plain.UnmarshalBuffers(data, nil); err != nil {
		t.Fatal(err)
	}
	want, _, err := protoBatch(t, h, sub, props, plain.msgs)
	if err != nil {
		t.Fatal(err)
	}
	r := receiveReply{pooled: true}
	if err := r.UnmarshalBuffers(data, grpcx.BufferPool); err != nil {
		t.Fatal(err)
	}
	if r.buf == nil {
		t.Fatal("pooled decode kept no buffer")
	}
	s := &stream{h: h, sub: sub, props: props, enc: &streamEncoder{h: h, sub: sub, props: props}}
	b, _ := s.batch(context.Background(), s.enc, r.msgs)
	if b.err != nil {
		t.Fatal(b.err)
	}
	ids := b.ids
	scribble := r.buf.ReadOnlyData()
	r.free()
	for i := range scribble {
		scribble[i] = 0xaa // as the pool's next user might
	}
	bs, _ := b.wire.MarshalBuffers(grpcx.BufferPool)
	b.free()
	got := bs.Materialize()
	bs.Free()
	if !bytes.Equal(got, want) {
		t.Fatal("the encoded response changed when the answer's buffer was reused")
	}
	for i, id := range ids {
		if id != plain.msgs[i].ackID {
			t.Fatalf("ack id %d = %q after the buffer was reused, want %q", i, id, plain.msgs[i].ackID)
		}
	}
}

// BenchmarkStreamBatchWire: a 1000-message Receive answer to an encoded
// StreamingPullResponse as the stream does it now (pooled decode, own encoding).
func BenchmarkStreamBatchWire(b *testing.B) {
	data := benchReceiveAnswer(b, 1000)
	h := New(Deps{}).Subscriber
	sub := &subInfo{spec: &pubsubpb.Subscription{}}
	props := &pubsubpb.StreamingPullResponse_SubscriptionProperties{}
	s := &stream{h: h, sub: sub, props: props, enc: &streamEncoder{h: h, sub: sub, props: props}}
	b.SetBytes(int64(data.Len()))
	b.ReportAllocs()
	for b.Loop() {
		r := receiveReply{pooled: true}
		if err := r.UnmarshalBuffers(data, grpcx.BufferPool); err != nil {
			b.Fatal(err)
		}
		bt, _ := s.batch(context.Background(), s.enc, r.msgs)
		r.free()
		enc, err := grpcx.Codec.Marshal(bt.wire)
		if err != nil {
			b.Fatal(err)
		}
		bt.free()
		enc.Free() // as gRPC does once written
	}
}
