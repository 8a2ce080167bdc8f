package storagewire

import (
	"math/rand"
	"testing"

	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func randomShareFetchResponse(rnd *rand.Rand) *storagev1.ShareFetchResponse {
	m := &storagev1.ShareFetchResponse{}
	for i := rnd.Intn(3); i > 0; i-- {
		m.AckResults = append(m.AckResults, &storagev1.ShareAckResult{
			Topic: []string{"", "t", "topic-ü"}[rnd.Intn(3)], Partition: int32(rnd.Intn(300)) - 2,
			Error: storagev1.ShareError(rnd.Intn(5)), Message: []string{"", "no such offset"}[rnd.Intn(2)],
		})
	}
	for i := rnd.Intn(7); i > 0; i-- {
		p := &storagev1.SharePartitionRecords{
			Topic: []string{"", "t", "long.topic_name"}[rnd.Intn(3)], Partition: int32(rnd.Intn(300)),
			Error: storagev1.ShareError(rnd.Intn(5)), Message: []string{"", "gone"}[rnd.Intn(2)],
			Batches: randomBytes(rnd, 40000),
		}
		for j := rnd.Intn(4); j > 0; j-- {
			p.Acquired = append(p.Acquired, &storagev1.ShareAcquiredRange{FirstOffset: randomInt64(rnd), LastOffset: randomInt64(rnd), DeliveryCount: int32(rnd.Intn(12)) - 1})
		}
		m.Partitions = append(m.Partitions, p)
	}
	return m
}

// TestShareFetchResponseDecode: DecodeShareFetchResponse reads what proto.Marshal
// writes as proto.Unmarshal does, each partition's batches a capped view of the
// input; an answer with records one by one (not as_batch), or an unknown field, is
// refused so that proto.Unmarshal decodes it.
func TestShareFetchResponseDecode(t *testing.T) {
	rnd := rand.New(rand.NewSource(7))
	for i := 0; i < 300; i++ {
		want := randomShareFetchResponse(rnd)
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var got storagev1.ShareFetchResponse
		if !DecodeShareFetchResponse(b, &got) {
			t.Fatalf("case %d: refused", i)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("case %d: decoded\n%v\nwant\n%v", i, &got, want)
		}
		var firsts []byte
		for _, p := range got.Partitions {
			if len(p.Batches) > 0 {
				firsts = append(firsts, p.Batches[0])
			}
		}
		for k := range b {
			b[k] ^= 0xff // a view sees it
		}
		for _, p := range got.Partitions {
			if len(p.Batches) == 0 {
				continue
			}
			if cap(p.Batches) != len(p.Batches) || p.Batches[0] != ^firsts[0] {
				t.Fatalf("case %d: batches are not a capped view of the input", i)
			}
			firsts = firsts[1:]
		}
	}
	perRecord := &storagev1.ShareFetchResponse{Partitions: []*storagev1.SharePartitionRecords{{
		Topic: "t", Records: []*storagev1.ShareAcquiredRecord{{DeliveryCount: 1, Record: &storagev1.Record{Value: []byte("v")}}},
	}}}
	b, _ := proto.Marshal(perRecord)
	if DecodeShareFetchResponse(b, &storagev1.ShareFetchResponse{}) {
		t.Fatal("an answer with records one by one was decoded")
	}
	unknown := append(b[:0:0], 0x18, 0x01) // field 3, varint: unknown to ShareFetchResponse
	if DecodeShareFetchResponse(unknown, &storagev1.ShareFetchResponse{}) {
		t.Fatal("an unknown field was decoded")
	}
}

// FuzzShareFetchResponse: whatever DecodeShareFetchResponse accepts, proto.Unmarshal
// decodes to the same message.
func FuzzShareFetchResponse(f *testing.F) {
	rnd := rand.New(rand.NewSource(8))
	for i := 0; i < 8; i++ {
		b, _ := proto.Marshal(randomShareFetchResponse(rnd))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got storagev1.ShareFetchResponse
		if !DecodeShareFetchResponse(b, &got) {
			return
		}
		var want storagev1.ShareFetchResponse
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatalf("decoded what proto.Unmarshal refuses: %v", err)
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("decoded\n%v\nwant\n%v", &got, &want)
		}
	})
}
