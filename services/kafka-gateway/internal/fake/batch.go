package fake

import (
	"encoding/binary"
	"hash/crc32"
	"time"
)

// Batch encodes values as one uncompressed Kafka RecordBatch v2 (magic 2, no producer
// id, offsets 0..n-1, timestamps now) with a correct CRC-32C, as a producer sends it.
func Batch(values ...string) []byte {
	ts := time.Now().UnixMilli()
	var recs []byte
	for i, v := range values {
		var body []byte
		body = append(body, 0)
		body = binary.AppendVarint(body, 0)
		body = binary.AppendVarint(body, int64(i))
		body = binary.AppendVarint(body, -1)
		body = binary.AppendVarint(body, int64(len(v)))
		body = append(body, v...)
		body = binary.AppendVarint(body, 0)
		recs = binary.AppendVarint(recs, int64(len(body)))
		recs = append(recs, body...)
	}
	b := make([]byte, 0, 61+len(recs))
	b = binary.BigEndian.AppendUint64(b, 0)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)
	b = append(b, 2)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(values)-1))
	b = binary.BigEndian.AppendUint64(b, uint64(ts))
	b = binary.BigEndian.AppendUint64(b, uint64(ts))
	b = binary.BigEndian.AppendUint64(b, 0xffffffffffffffff)
	b = binary.BigEndian.AppendUint16(b, 0xffff)
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)
	b = binary.BigEndian.AppendUint32(b, uint32(len(values)))
	b = append(b, recs...)
	binary.BigEndian.PutUint32(b[8:12], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}
