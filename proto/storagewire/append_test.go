package storagewire

import (
	"bytes"
	"math/rand"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/proto/storagewire/wiretest"
)

func randomAppendStreamRequest(rnd *rand.Rand) *storagev1.AppendStreamRequest {
	m := &storagev1.AppendStreamRequest{Id: []uint64{0, 1, rnd.Uint64()}[rnd.Intn(3)]}
	for i := rnd.Intn(6); i > 0; i-- {
		m.Channels = append(m.Channels, &storagev1.ChannelBatches{
			Channel:      []string{"", "kafka.t", "kafka.b~12", "kafka.é"}[rnd.Intn(4)],
			Batches:      randomBytes(rnd, 40000),
			SingleBatch:  rnd.Intn(2) == 0,
			ValidateOnly: rnd.Intn(4) == 0,
		})
	}
	return m
}

// Round trip: AppendStreamRequestBuffers writes proto.Marshal's bytes with the batches
// by reference, and DecodeAppendStreamRequest reads them back as views of the input.
func TestAppendStreamRequestRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	for round := range 300 {
		m := randomAppendStreamRequest(rnd)
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := AppendStreamRequestBuffers(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := bs.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("round %d: encoded %x, proto.Marshal %x", round, got, want)
		}
		for _, cb := range m.Channels {
			if len(cb.Batches) > 0 && !referenced(bs, cb.Batches) {
				t.Fatalf("round %d: batches of %q were copied, not referenced", round, cb.Channel)
			}
		}
		var got storagev1.AppendStreamRequest
		if !DecodeAppendStreamRequest(want, &got) {
			t.Fatalf("round %d: proto.Marshal's encoding of %v not decoded", round, m)
		}
		if !proto.Equal(&got, m) {
			t.Fatalf("round %d: decoded %v, want %v", round, &got, m)
		}
		for _, cb := range got.Channels {
			if len(cb.Batches) > 0 && (!wiretest.Within(want, cb.Batches) || cap(cb.Batches) != len(cb.Batches)) {
				t.Fatalf("round %d: batches of %q are not a capped view of the input", round, cb.Channel)
			}
		}
	}
	bad := &storagev1.AppendStreamRequest{Channels: []*storagev1.ChannelBatches{{Channel: "\xff"}}}
	if _, err := AppendStreamRequestBuffers(bad); err == nil {
		t.Error("invalid UTF-8 channel name encoded; proto.Marshal refuses it")
	}
	// Outside the plain shape, the decoder declines.
	plain, _ := proto.Marshal(&storagev1.AppendStreamRequest{Id: 5, Channels: []*storagev1.ChannelBatches{{Channel: "kafka.x", Batches: []byte{9}}}})
	unknown := protowire.AppendVarint(protowire.AppendTag(bytes.Clone(plain), 15, protowire.VarintType), 1)
	twiceID := protowire.AppendVarint(protowire.AppendTag(bytes.Clone(plain), 1, protowire.VarintType), 6)
	badUTF8 := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("\xff"))
	badUTF8 = protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), badUTF8)
	for name, b := range map[string][]byte{"unknown field": unknown, "repeated id": twiceID, "bad UTF-8": badUTF8, "truncated": plain[:len(plain)-1]} {
		var m storagev1.AppendStreamRequest
		if DecodeAppendStreamRequest(b, &m) {
			t.Errorf("%s: decoded as %v", name, &m)
		}
	}
}

// FuzzAppendStreamRequest: whatever the decoder accepts, proto.Unmarshal accepts and
// decodes to the same message, which the encoder writes back as proto.Marshal does.
func FuzzAppendStreamRequest(f *testing.F) {
	rnd := rand.New(rand.NewSource(2))
	for range 8 {
		b, _ := proto.Marshal(randomAppendStreamRequest(rnd))
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x03, 0x0a, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var got storagev1.AppendStreamRequest
		if !DecodeAppendStreamRequest(b, &got) {
			return
		}
		var want storagev1.AppendStreamRequest
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatalf("decoded %v; proto.Unmarshal: %v", &got, err)
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("decoded %v, proto.Unmarshal %v", &got, &want)
		}
		bs, err := AppendStreamRequestBuffers(&got)
		if err != nil {
			t.Fatal(err)
		}
		if enc, pm := bs.Materialize(), mustMarshal(t, &got); !bytes.Equal(enc, pm) {
			t.Fatalf("re-encoded %x, proto.Marshal %x", enc, pm)
		}
	})
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
