// Package kafkabatch encodes records as one uncompressed Kafka RecordBatch v2 (the
// on-wire and on-disk record format of KIP-98, magic 2), as a broker answers a fetch
// with records it holds one by one: storage-core's share partitions and the
// kafka-gateway's ShareFetch both build their batches here.
package kafkabatch

import (
	"encoding/binary"
	"hash/crc32"
)

// HeaderLen is a RecordBatch v2 header's size in bytes (base offset to record count).
const HeaderLen = 61

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is one record header: a key and a nullable value.
type Header struct {
	Key   string
	Value []byte
}

// Record is one record to encode: its Kafka offset, its timestamp (ms since the epoch),
// nullable key and value, and headers.
type Record struct {
	Offset      int64
	TimestampMs int64
	Key, Value  []byte
	Headers     []Header
}

// Encode returns the n records rec(0) .. rec(n-1) (n >= 1, offsets ascending, gaps
// allowed) as one uncompressed, non-transactional RecordBatch v2 at their offsets:
// base offset and first timestamp those of rec(0), last offset delta and max timestamp
// from the records, producer id, epoch and base sequence -1, partition leader epoch 0,
// CRC-32C over the attributes onward. The buffer is allocated at the batch's exact
// size; the bytes are what kmsg.RecordBatch.AppendTo gives for the same records. rec is
// called twice per record.
func Encode(n int, rec func(i int) Record) []byte {
	r0 := rec(0)
	first, ts0 := r0.Offset, r0.TimestampMs
	size := HeaderLen
	for i := 0; i < n; i++ {
		r := rec(i)
		l := recordLen(&r, ts0, first)
		size += varintLen(int64(l)) + l
	}
	b := make([]byte, HeaderLen, size)
	maxTS, last := ts0, first
	for i := 0; i < n; i++ {
		r := rec(i)
		maxTS, last = max(maxTS, r.TimestampMs), r.Offset
		b = binary.AppendVarint(b, int64(recordLen(&r, ts0, first)))
		b = append(b, 0) // attributes
		b = binary.AppendVarint(b, r.TimestampMs-ts0)
		b = binary.AppendVarint(b, r.Offset-first)
		b = appendNullableBytes(b, r.Key)
		b = appendNullableBytes(b, r.Value)
		b = binary.AppendVarint(b, int64(len(r.Headers)))
		for _, hd := range r.Headers {
			b = binary.AppendVarint(b, int64(len(hd.Key)))
			b = append(b, hd.Key...)
			b = appendNullableBytes(b, hd.Value)
		}
	}
	be := binary.BigEndian
	be.PutUint64(b[0:], uint64(first))
	be.PutUint32(b[8:], uint32(len(b)-12))
	be.PutUint32(b[12:], 0) // partition leader epoch
	b[16] = 2               // magic
	be.PutUint16(b[21:], 0) // attributes: uncompressed, not transactional
	be.PutUint32(b[23:], uint32(int32(last-first)))
	be.PutUint64(b[27:], uint64(ts0))
	be.PutUint64(b[35:], uint64(maxTS))
	be.PutUint64(b[43:], ^uint64(0)) // producer id -1
	be.PutUint16(b[51:], ^uint16(0)) // producer epoch -1
	be.PutUint32(b[53:], ^uint32(0)) // base sequence -1
	be.PutUint32(b[57:], uint32(n))
	be.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

// recordLen is the size in bytes of r's Record v2 encoding after its Length varint,
// at timestamp and offset deltas from ts0 and first.
func recordLen(r *Record, ts0, first int64) int {
	n := 1 + varintLen(r.TimestampMs-ts0) + varintLen(r.Offset-first) +
		nullableBytesLen(r.Key) + nullableBytesLen(r.Value) + varintLen(int64(len(r.Headers)))
	for _, hd := range r.Headers {
		n += varintLen(int64(len(hd.Key))) + len(hd.Key) + nullableBytesLen(hd.Value)
	}
	return n
}

// varintLen is the size of v as a zig-zag varint, bytes.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// nullableBytesLen is the size of b as Kafka varint-length nullable bytes (nil: -1).
func nullableBytesLen(b []byte) int {
	if b == nil {
		return 1
	}
	return varintLen(int64(len(b))) + len(b)
}

func appendNullableBytes(dst, b []byte) []byte {
	if b == nil {
		return append(dst, 1) // varint -1
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}
