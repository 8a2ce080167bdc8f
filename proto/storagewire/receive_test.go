package storagewire

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// engineHeader stands for a service's own header type, laid out as Header.
type engineHeader struct {
	Key   string
	Value []byte
}

func randomMessages(rnd *rand.Rand, n int) []ReceivedMessage[engineHeader] {
	ms := make([]ReceivedMessage[engineHeader], n)
	for i := range ms {
		r := Record[engineHeader]{
			Sequence: randomInt64(rnd), TimestampMs: randomInt64(rnd),
			Key: randomBytes(rnd, 300), Value: randomBytes(rnd, 3000),
			ProducerID: randomInt64(rnd), ProducerEpoch: []int32{-1, 0, rnd.Int31n(32767)}[rnd.Intn(3)],
			Transactional: rnd.Intn(2) == 0, Control: rnd.Intn(5) == 0,
		}
		for j := rnd.Intn(5); j > 0; j-- {
			r.Headers = append(r.Headers, engineHeader{Key: []string{"", "k", "_pubsub_message_id", "ключ"}[rnd.Intn(4)], Value: randomBytes(rnd, 50)})
		}
		ms[i] = ReceivedMessage[engineHeader]{
			AckID: []string{"", fmt.Sprintf("%x-%d", rnd.Uint64(), rnd.Intn(9))}[rnd.Intn(2)], Record: r,
			Source: []string{"", "gcp.t"}[rnd.Intn(2)], SourceSequence: randomInt64(rnd),
			DeliveryAttempt: []int32{0, 1, rnd.Int31(), -2}[rnd.Intn(4)],
		}
	}
	return ms
}

// toProto is ms as the ReceiveResponse proto.Marshal would encode.
func toProto(ms []ReceivedMessage[engineHeader]) *storagev1.ReceiveResponse {
	resp := &storagev1.ReceiveResponse{}
	for _, m := range ms {
		r := m.Record
		pr := &storagev1.Record{Sequence: r.Sequence, TimestampMs: r.TimestampMs, Key: r.Key, Value: r.Value,
			ProducerId: r.ProducerID, ProducerEpoch: r.ProducerEpoch, Transactional: r.Transactional, Control: r.Control}
		for _, h := range r.Headers {
			pr.Headers = append(pr.Headers, &storagev1.Header{Key: h.Key, Value: h.Value})
		}
		resp.Messages = append(resp.Messages, &storagev1.ReceivedMessage{AckId: m.AckID, Record: pr, Source: m.Source, SourceSequence: m.SourceSequence, DeliveryAttempt: m.DeliveryAttempt})
	}
	return resp
}

// collector is a ReceiveVisitor building what it is given back into messages to
// encode and into a ReceiveResponse.
type collector struct {
	msgs []ReceivedMessage[Header]
	hdrs []Header
}

func (c *collector) Header(key, value []byte) {
	c.hdrs = append(c.hdrs, Header{Key: string(key), Value: value})
}

func (c *collector) Message(m MessageView) {
	r := m.Record
	c.msgs = append(c.msgs, ReceivedMessage[Header]{
		AckID: string(m.AckID), Source: string(m.Source), SourceSequence: m.SourceSequence, DeliveryAttempt: m.DeliveryAttempt,
		Record: Record[Header]{Sequence: r.Sequence, TimestampMs: r.TimestampMs, Key: r.Key, Value: r.Value, Headers: c.hdrs,
			ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch, Transactional: r.Transactional, Control: r.Control},
	})
	c.hdrs = nil
}

func (c *collector) proto() *storagev1.ReceiveResponse {
	ms := make([]ReceivedMessage[engineHeader], len(c.msgs))
	for i, m := range c.msgs {
		hs := make([]engineHeader, len(m.Record.Headers))
		for j, h := range m.Record.Headers {
			hs[j] = engineHeader(h)
		}
		ms[i] = ReceivedMessage[engineHeader]{AckID: m.AckID, Source: m.Source, SourceSequence: m.SourceSequence, DeliveryAttempt: m.DeliveryAttempt,
			Record: Record[engineHeader]{Sequence: m.Record.Sequence, TimestampMs: m.Record.TimestampMs, Key: m.Record.Key, Value: m.Record.Value, Headers: hs,
				ProducerID: m.Record.ProducerID, ProducerEpoch: m.Record.ProducerEpoch, Transactional: m.Record.Transactional, Control: m.Record.Control}}
	}
	return toProto(ms)
}

func encodeReceive[H HeaderLike](t *testing.T, ms []ReceivedMessage[H], nextBytes int64) []byte {
	t.Helper()
	bs, err := ReceiveResponseBuffers(len(ms), func(i int) ReceivedMessage[H] { return ms[i] }, nextBytes, mem.DefaultBufferPool())
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Free()
	return bs.Materialize()
}

// Round trip: ReceiveResponseBuffers writes proto.Marshal's bytes (keys and values
// absent, empty and full, zero and negative numbers, answers below and above the
// pooling threshold), and DecodeReceiveResponse gives back the same messages, keys and
// values present exactly when they were.
func TestReceiveResponseRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewSource(5))
	for round := range 300 {
		ms := randomMessages(rnd, rnd.Intn(25))
		next := []int64{0, 0, rnd.Int63()}[rnd.Intn(3)]
		pm := toProto(ms)
		pm.NextBytes = next
		want := mustMarshal(t, pm)
		got := encodeReceive(t, ms, next)
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: encoded %x, proto.Marshal %x", round, got, want)
		}
		if n, err := CountReceivedMessages(got); err != nil || n != len(ms) {
			t.Fatalf("round %d: counted %d messages (%v), want %d", round, n, err, len(ms))
		}
		var c collector
		if gotNext, err := DecodeReceiveResponse(got, &c); err != nil || gotNext != next {
			t.Fatalf("round %d: next_bytes %d (%v), want %d", round, gotNext, err, next)
		}
		if len(c.msgs) != len(ms) {
			t.Fatalf("round %d: decoded %d messages, want %d", round, len(c.msgs), len(ms))
		}
		for i, m := range ms {
			d := c.msgs[i].Record
			if (d.Key == nil) != (m.Record.Key == nil) || (d.Value == nil) != (m.Record.Value == nil) {
				t.Fatalf("round %d message %d: key/value presence %v/%v, want %v/%v", round, i, d.Key != nil, d.Value != nil, m.Record.Key != nil, m.Record.Value != nil)
			}
			for j, h := range m.Record.Headers {
				if got := d.Headers[j].Value; (got == nil) != (h.Value == nil) {
					t.Fatalf("round %d message %d header %d: value null %v, want %v", round, i, j, got == nil, h.Value == nil)
				}
			}
		}
		if !proto.Equal(c.proto(), toProto(ms)) {
			t.Fatalf("round %d: decoded %v, want %v", round, c.proto(), toProto(ms))
		}
	}
	if got := encodeReceive(t, []ReceivedMessage[Header](nil), 0); len(got) != 0 {
		t.Errorf("no messages encoded as %x", got)
	}
	for name, m := range map[string]ReceivedMessage[Header]{
		"header key": {Record: Record[Header]{Headers: []Header{{Key: "\xff"}}}},
		"ack id":     {AckID: "\xfe"},
		"source":     {Source: "a\xff"},
	} {
		if _, err := ReceiveResponseBuffers(1, func(int) ReceivedMessage[Header] { return m }, 0, mem.DefaultBufferPool()); err == nil {
			t.Errorf("%s not UTF-8 encoded; proto.Marshal refuses it", name)
		}
	}
}

// FuzzReceiveResponse: over arbitrary bytes, DecodeReceiveResponse fails exactly when
// proto.Unmarshal fails, otherwise gives proto's messages (unknown fields dropped),
// and the encoder writes those back as proto.Marshal does.
func FuzzReceiveResponse(f *testing.F) {
	rnd := rand.New(rand.NewSource(6))
	for range 8 {
		b, _ := proto.Marshal(toProto(randomMessages(rnd, 1+rnd.Intn(3))))
		f.Add(b)
	}
	f.Add(protowire.AppendTag(nil, 1, protowire.StartGroupType))
	f.Add(protowire.AppendTag(nil, 1, protowire.EndGroupType))
	f.Add([]byte{0x0a, 0x04, 0x12, 0x02, 0x2a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		var want storagev1.ReceiveResponse
		perr := proto.Unmarshal(b, &want)
		var c collector
		next, err := DecodeReceiveResponse(b, &c)
		if (perr == nil) != (err == nil) {
			t.Fatalf("proto.Unmarshal: %v, DecodeReceiveResponse: %v", perr, err)
		}
		n, cerr := CountReceivedMessages(b)
		if perr != nil {
			return
		}
		if cerr != nil || n != len(want.Messages) {
			t.Fatalf("counted %d messages (%v), want %d", n, cerr, len(want.Messages))
		}
		// Unknown fields dropped; the view cannot tell an absent record from an empty one.
		want.ProtoReflect().SetUnknown(nil)
		for _, m := range want.Messages {
			m.ProtoReflect().SetUnknown(nil)
			if m.Record == nil {
				m.Record = &storagev1.Record{}
			}
			m.Record.ProtoReflect().SetUnknown(nil)
			for _, h := range m.Record.Headers {
				h.ProtoReflect().SetUnknown(nil)
			}
		}
		got := c.proto()
		got.NextBytes = next
		if !proto.Equal(got, &want) {
			t.Fatalf("decoded %v, proto.Unmarshal %v", got, &want)
		}
		if enc, pm := encodeReceive(t, c.msgs, next), mustMarshal(t, &want); !bytes.Equal(enc, pm) {
			t.Fatalf("re-encoded %x, proto.Marshal %x", enc, pm)
		}
	})
}
