package storagewire

import (
	"bytes"
	"math/rand"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/proto/storagewire/wiretest"
)

func randomFetchResponse(rnd *rand.Rand) *storagev1.FetchResponse {
	m := &storagev1.FetchResponse{}
	for i := rnd.Intn(6); i > 0; i-- {
		var aborted []*storagev1.AbortedTransaction
		for j := rnd.Intn(4) - 1; j > 0; j-- {
			aborted = append(aborted, &storagev1.AbortedTransaction{ProducerId: randomInt64(rnd), FirstSequence: randomInt64(rnd)})
		}
		m.Results = append(m.Results, &storagev1.FetchChannelResult{
			AbortedTransactions: aborted,
			Channel:             []string{"", "kafka.a", "kafka.c~3"}[rnd.Intn(3)],
			Error:               storagev1.ErrorCode([]int32{0, 1, 17, -3}[rnd.Intn(4)]),
			HighWatermark:       randomInt64(rnd),
			LastStableSequence:  randomInt64(rnd),
			LogStartSequence:    randomInt64(rnd),
			Batches:             randomBytes(rnd, 40000),
		})
	}
	return m
}

// Round trip: FetchResponseBuffers writes proto.Marshal's bytes with the batches in
// the buffers batch gives (or by plain reference), and DecodeFetchResponse reads them
// back as capped views of the input, also when the input arrived in pieces.
func TestFetchResponseRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewSource(3))
	for round := range 300 {
		m := randomFetchResponse(rnd)
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		hooked := 0
		var batch func([]byte) mem.Buffer
		if round%2 == 0 {
			batch = func(b []byte) mem.Buffer {
				hooked++
				if hooked%2 == 0 {
					return nil
				}
				return mem.SliceBuffer(b)
			}
		}
		bs, err := FetchResponseBuffers(m, batch)
		if err != nil {
			t.Fatal(err)
		}
		if got := bs.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("round %d: encoded %x, proto.Marshal %x", round, got, want)
		}
		withBatches := 0
		for _, r := range m.Results {
			if len(r.Batches) > 0 {
				withBatches++
				if !referenced(bs, r.Batches) {
					t.Fatalf("round %d: batches of %q were copied, not referenced", round, r.Channel)
				}
			}
		}
		if batch != nil && hooked != withBatches {
			t.Fatalf("round %d: batch called %d times for %d results with batches", round, hooked, withBatches)
		}
		in := wiretest.Split(want, 1+rnd.Intn(20000)).Materialize()
		var got storagev1.FetchResponse
		if !DecodeFetchResponse(in, &got) {
			t.Fatalf("round %d: proto.Marshal's encoding of %v not decoded", round, m)
		}
		if !proto.Equal(&got, m) {
			t.Fatalf("round %d: decoded %v, want %v", round, &got, m)
		}
		for _, r := range got.Results {
			if len(r.Batches) > 0 && (!wiretest.Within(in, r.Batches) || cap(r.Batches) != len(r.Batches)) {
				t.Fatalf("round %d: batches of %q are not a capped view of the input", round, r.Channel)
			}
		}
	}
	// Outside the handled shape, the decoder declines.
	result := func(fields ...[]byte) []byte {
		out := protowire.AppendTag(nil, 1, protowire.BytesType)
		return protowire.AppendBytes(out, bytes.Join(fields, nil))
	}
	field := func(num protowire.Number, typ protowire.Type, v []byte) []byte {
		return append(protowire.AppendTag(nil, num, typ), v...)
	}
	str := func(s string) []byte { return protowire.AppendString(nil, s) }
	for name, b := range map[string][]byte{
		"unknown field":   result(field(1, protowire.BytesType, str("kafka.x")), field(9, protowire.VarintType, protowire.AppendVarint(nil, 3))),
		"wrong wire type": result(field(3, protowire.BytesType, str("x"))),
		"bad utf-8":       result(field(1, protowire.BytesType, str("\xff"))),
		"truncated":       result(field(6, protowire.BytesType, str("abc")))[:5],
		"top-level field": field(2, protowire.VarintType, protowire.AppendVarint(nil, 1)),
	} {
		var m storagev1.FetchResponse
		if DecodeFetchResponse(b, &m) {
			t.Errorf("%s: decoded as %v", name, &m)
		}
	}
}

// FuzzFetchResponse: whatever the decoder accepts, proto.Unmarshal accepts and decodes
// to the same message, which the encoder writes back as proto.Marshal does.
func FuzzFetchResponse(f *testing.F) {
	rnd := rand.New(rand.NewSource(4))
	for range 8 {
		b, _ := proto.Marshal(randomFetchResponse(rnd))
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x05, 0x32, 0x10})
	f.Fuzz(func(t *testing.T, b []byte) {
		var got storagev1.FetchResponse
		if !DecodeFetchResponse(b, &got) {
			return
		}
		var want storagev1.FetchResponse
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatalf("decoded %v; proto.Unmarshal: %v", &got, err)
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("decoded %v, proto.Unmarshal %v", &got, &want)
		}
		bs, err := FetchResponseBuffers(&got, nil)
		if err != nil {
			t.Fatal(err)
		}
		if enc, pm := bs.Materialize(), mustMarshal(t, &got); !bytes.Equal(enc, pm) {
			t.Fatalf("re-encoded %x, proto.Marshal %x", enc, pm)
		}
	})
}
