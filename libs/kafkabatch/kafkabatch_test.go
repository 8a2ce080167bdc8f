package kafkabatch

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// kmsgEncode is Encode through kmsg.Record and kmsg.RecordBatch: the reference for
// the wire bytes.
func kmsgEncode(recs []Record) []byte {
	first, ts0 := recs[0].Offset, recs[0].TimestampMs
	maxTS := ts0
	var body []byte
	for _, r := range recs {
		maxTS = max(maxTS, r.TimestampMs)
		kr := kmsg.Record{TimestampDelta64: r.TimestampMs - ts0, OffsetDelta: int32(r.Offset - first), Key: r.Key, Value: r.Value}
		for _, hd := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: hd.Key, Value: hd.Value})
		}
		enc := kr.AppendTo(nil)[1:] // without the Length varint (0, one byte)
		body = binary.AppendVarint(body, int64(len(enc)))
		body = append(body, enc...)
	}
	rb := kmsg.RecordBatch{
		FirstOffset: first, Magic: 2, LastOffsetDelta: int32(recs[len(recs)-1].Offset - first),
		FirstTimestamp: ts0, MaxTimestamp: maxTS, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: int32(len(recs)), Records: body,
	}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:12], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func encodeAll(recs []Record) []byte {
	return Encode(len(recs), func(i int) Record { return recs[i] })
}

// TestEncodeMatchesKmsg: Encode's bytes are kmsg's encoding of the same records, for
// nil and empty keys, values and header values, negative and large timestamp deltas,
// offset gaps, many headers and values past one-byte varints; the buffer is exactly
// the batch's size.
func TestEncodeMatchesKmsg(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bytesOf := func() []byte {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []byte{}
		default:
			b := make([]byte, rng.IntN(300))
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
			return b
		}
	}
	for round := 0; round < 600; round++ {
		n := 1 + rng.IntN(40)
		off := rng.Int64N(1 << 40)
		ts := rng.Int64N(1<<42) - 1<<20
		recs := make([]Record, n)
		for i := range recs {
			recs[i] = Record{Offset: off, TimestampMs: ts + rng.Int64N(1<<30) - 1<<29, Key: bytesOf(), Value: bytesOf()}
			for h := rng.IntN(5); h > 0; h-- {
				recs[i].Headers = append(recs[i].Headers, Header{Key: string(bytesOf()), Value: bytesOf()})
			}
			off += 1 + rng.Int64N(3)*rng.Int64N(1000)
		}
		got, want := encodeAll(recs), kmsgEncode(recs)
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: %d records: Encode differs from kmsg's encoding\n got  %x\n want %x", round, n, got, want)
		}
		if cap(got) != len(got) {
			t.Fatalf("round %d: buffer of %d bytes for a %d-byte batch", round, cap(got), len(got))
		}
	}
}

// BenchmarkEncode: 500 records of 1 KiB with one header, a full share fetch; "kmsg"
// is the encoding through kmsg.Record and kmsg.RecordBatch.
func BenchmarkEncode(b *testing.B) {
	recs := make([]Record, 500)
	for i := range recs {
		recs[i] = Record{Offset: int64(i), TimestampMs: 1_700_000_000_000 + int64(i), Key: []byte("key-0001"),
			Value: make([]byte, 1024), Headers: []Header{{Key: "h", Value: []byte("v")}}}
	}
	for name, enc := range map[string]func([]Record) []byte{"inplace": encodeAll, "kmsg": kmsgEncode} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				enc(recs)
			}
		})
	}
}
