package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Kafka RecordBatch v2 layout (KIP-98, Kafka DefaultRecordBatch.java). All integers big
// endian. The CRC (CRC-32C, Castagnoli) covers bytes from attributes to the end.
//
//	0  baseOffset           int64
//	8  batchLength          int32 (bytes after this field)
//	12 partitionLeaderEpoch int32
//	16 magic                int8 (2)
//	17 crc                  uint32
//	21 attributes           int16
//	23 lastOffsetDelta      int32
//	27 baseTimestamp        int64
//	35 maxTimestamp         int64
//	43 producerId           int64
//	51 producerEpoch        int16
//	53 baseSequence         int32
//	57 recordCount          int32
//	61 records...
const (
	batchHeaderLen   = 61
	batchLengthField = 12 // bytes before and including batchLength
	offBatchLength   = 8
	offMagic         = 16
	offCRC           = 17
	offAttributes    = 21
	offLastDelta     = 23
	offBaseTS        = 27
	offMaxTS         = 35
	offProducerID    = 43
	offProducerEpoch = 51
	offBaseSequence  = 53
	offRecordCount   = 57

	attrCompressionMask = 0x07
	attrTimestampType   = 0x08 // 1 = LogAppendTime
	attrTransactional   = 0x10
	attrControl         = 0x20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// batchHeader holds the fields of a v2 batch header the engine uses.
type batchHeader struct {
	BaseOffset      int64
	Length          int32 // whole frame, including the first 12 bytes
	Attributes      int16
	LastOffsetDelta int32
	BaseTimestamp   int64
	MaxTimestamp    int64
	ProducerID      int64
	ProducerEpoch   int16
	BaseSequence    int32
	RecordCount     int32
}

// LastOffset is the offset of the batch's last record.
func (h *batchHeader) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// NextOffset is the offset after the batch.
func (h *batchHeader) NextOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) + 1 }

// LastSequence is the producer sequence of the batch's last record, wrapping at
// MaxInt32 as Kafka's DefaultRecordBatch.incrementSequence does.
func (h *batchHeader) LastSequence() int32 {
	return incrementSequence(h.BaseSequence, h.LastOffsetDelta)
}

func incrementSequence(seq, inc int32) int32 {
	if seq > (1<<31-1)-inc {
		return inc - ((1<<31 - 1) - seq) - 1
	}
	return seq + inc
}

func parseHeader(b []byte) batchHeader {
	return batchHeader{
		BaseOffset:      int64(binary.BigEndian.Uint64(b[0:])),
		Length:          int32(binary.BigEndian.Uint32(b[offBatchLength:])) + batchLengthField,
		Attributes:      int16(binary.BigEndian.Uint16(b[offAttributes:])),
		LastOffsetDelta: int32(binary.BigEndian.Uint32(b[offLastDelta:])),
		BaseTimestamp:   int64(binary.BigEndian.Uint64(b[offBaseTS:])),
		MaxTimestamp:    int64(binary.BigEndian.Uint64(b[offMaxTS:])),
		ProducerID:      int64(binary.BigEndian.Uint64(b[offProducerID:])),
		ProducerEpoch:   int16(binary.BigEndian.Uint16(b[offProducerEpoch:])),
		BaseSequence:    int32(binary.BigEndian.Uint32(b[offBaseSequence:])),
		RecordCount:     int32(binary.BigEndian.Uint32(b[offRecordCount:])),
	}
}

// frameLen returns the length of the frame starting at b (12 + batchLength), or an
// error when the bytes cannot hold a v2 frame.
func frameLen(b []byte) (int, error) {
	if len(b) < batchHeaderLen {
		return 0, fmt.Errorf("%w: %d bytes, shorter than a batch header", ErrCorruptBatch, len(b))
	}
	bl := int32(binary.BigEndian.Uint32(b[offBatchLength:]))
	if bl < batchHeaderLen-batchLengthField {
		return 0, fmt.Errorf("%w: batch length %d", ErrCorruptBatch, bl)
	}
	n := int(bl) + batchLengthField
	if n > len(b) {
		return 0, fmt.Errorf("%w: batch length %d past the end (%d bytes left)", ErrCorruptBatch, bl, len(b))
	}
	return n, nil
}

// checkFrame validates one frame (exactly one batch in b): magic, CRC, record count and,
// for uncompressed batches, that the records present match the count. It returns the
// parsed header.
func checkFrame(b []byte) (batchHeader, error) {
	if b[offMagic] != 2 {
		return batchHeader{}, fmt.Errorf("%w: magic %d, only RecordBatch v2 is accepted", ErrInvalidRecord, b[offMagic])
	}
	h := parseHeader(b)
	if crc := crc32.Checksum(b[offAttributes:], castagnoli); crc != binary.BigEndian.Uint32(b[offCRC:]) {
		return h, fmt.Errorf("%w: CRC mismatch", ErrCorruptBatch)
	}
	if h.RecordCount <= 0 {
		return h, fmt.Errorf("%w: batch has %d records", ErrInvalidRecord, h.RecordCount)
	}
	if h.LastOffsetDelta != h.RecordCount-1 {
		return h, fmt.Errorf("%w: last offset delta %d with %d records", ErrCorruptBatch, h.LastOffsetDelta, h.RecordCount)
	}
	codec := h.Attributes & attrCompressionMask
	switch {
	case codec > 4:
		return h, fmt.Errorf("%w: codec %d", ErrUnsupportedCompression, codec)
	case codec == 0:
		if err := countRecords(b[batchHeaderLen:], int(h.RecordCount)); err != nil {
			return h, err
		}
	}
	return h, nil
}

// countRecords walks uncompressed records (each a varint length then the body) and
// checks there are exactly want of them filling recs.
func countRecords(recs []byte, want int) error {
	n := 0
	for len(recs) > 0 {
		l, k := binary.Varint(recs)
		if k <= 0 || l < 0 || int64(len(recs)-k) < l {
			return fmt.Errorf("%w: record %d has a bad length", ErrCorruptBatch, n)
		}
		recs = recs[k+int(l):]
		n++
		if n > want {
			break
		}
	}
	if n != want {
		return fmt.Errorf("%w: header says %d records, found %d", ErrCorruptBatch, want, n)
	}
	return nil
}

// setLogAppendTime marks a batch as LogAppendTime with max timestamp ts (ms) and
// recomputes its CRC, as Kafka's LogValidator does.
func setLogAppendTime(b []byte, ts int64) {
	attrs := binary.BigEndian.Uint16(b[offAttributes:]) | attrTimestampType
	binary.BigEndian.PutUint16(b[offAttributes:], attrs)
	binary.BigEndian.PutUint64(b[offMaxTS:], uint64(ts))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
}

// Header is one record header; repeated keys are kept in order.
type Header struct {
	Key   string
	Value []byte
}

// Record is a decoded record. Offset is the Kafka offset (sequence - 1). Key and Value
// are nil when null.
type Record struct {
	Offset        int64
	Timestamp     int64
	Key           []byte
	Value         []byte
	Headers       []Header
	ProducerID    int64
	ProducerEpoch int16
	Transactional bool
	Control       bool
}

// NewRecord is a record to encode with EncodeBatch. Timestamp 0 means now.
type NewRecord struct {
	Timestamp int64
	Key       []byte // nil = null
	Value     []byte // nil = null
	Headers   []Header
}

// EncodeBatch encodes records as one uncompressed RecordBatch v2 with producer id -1
// and base offset 0. now (ms) stands for zero timestamps.
func EncodeBatch(recs []NewRecord, now int64) []byte {
	if len(recs) == 0 {
		return nil
	}
	baseTS, maxTS := int64(0), int64(0)
	for i := range recs {
		ts := recs[i].Timestamp
		if ts == 0 {
			ts = now
		}
		if i == 0 || ts < baseTS {
			baseTS = ts
		}
		if i == 0 || ts > maxTS {
			maxTS = ts
		}
	}
	size := batchHeaderLen
	for i := range recs {
		size += 64 + len(recs[i].Key) + len(recs[i].Value)
		for _, h := range recs[i].Headers {
			size += 20 + len(h.Key) + len(h.Value)
		}
	}
	b := make([]byte, batchHeaderLen, size)
	var body []byte
	for i := range recs {
		r := &recs[i]
		ts := r.Timestamp
		if ts == 0 {
			ts = now
		}
		body = body[:0]
		body = append(body, 0) // attributes
		body = binary.AppendVarint(body, ts-baseTS)
		body = binary.AppendVarint(body, int64(i))
		body = appendVarBytes(body, r.Key)
		body = appendVarBytes(body, r.Value)
		body = binary.AppendVarint(body, int64(len(r.Headers)))
		for _, h := range r.Headers {
			body = binary.AppendVarint(body, int64(len(h.Key)))
			body = append(body, h.Key...)
			body = appendVarBytes(body, h.Value)
		}
		b = binary.AppendVarint(b, int64(len(body)))
		b = append(b, body...)
	}
	binary.BigEndian.PutUint64(b[0:], 0)
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-batchLengthField))
	binary.BigEndian.PutUint32(b[12:], 0xffffffff) // partition leader epoch -1
	b[offMagic] = 2
	binary.BigEndian.PutUint16(b[offAttributes:], 0)
	binary.BigEndian.PutUint32(b[offLastDelta:], uint32(len(recs)-1))
	binary.BigEndian.PutUint64(b[offBaseTS:], uint64(baseTS))
	binary.BigEndian.PutUint64(b[offMaxTS:], uint64(maxTS))
	binary.BigEndian.PutUint64(b[offProducerID:], 0xffffffffffffffff)
	binary.BigEndian.PutUint16(b[offProducerEpoch:], 0xffff)
	binary.BigEndian.PutUint32(b[offBaseSequence:], 0xffffffff)
	binary.BigEndian.PutUint32(b[offRecordCount:], uint32(len(recs)))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return b
}

func appendVarBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(b, -1)
	}
	b = binary.AppendVarint(b, int64(len(v)))
	return append(b, v...)
}

// DecodeBatch decodes the records of one stored frame, decompressing gzip, snappy (raw
// or xerial framed), lz4 (frame) and zstd. Records of a LogAppendTime batch get the
// batch's max timestamp. The returned slices alias b or the decompressed buffer.
func DecodeBatch(b []byte) ([]Record, error) {
	n, err := frameLen(b)
	if err != nil {
		return nil, err
	}
	b = b[:n]
	h := parseHeader(b)
	recs := b[batchHeaderLen:]
	if codec := h.Attributes & attrCompressionMask; codec != 0 {
		if codec > 4 {
			return nil, fmt.Errorf("%w: codec %d", ErrUnsupportedCompression, codec)
		}
		recs, err = decompress(recs, codec)
		if err != nil {
			return nil, fmt.Errorf("%w: decompress: %v", ErrCorruptBatch, err)
		}
	}
	// The count is the producer's claim (not checked against compressed content):
	// size the slice by what the bytes can hold, at least 7 bytes per record.
	out := make([]Record, 0, min(max(int(h.RecordCount), 0), len(recs)/7+1))
	logAppend := h.Attributes&attrTimestampType != 0
	for i := 0; i < int(h.RecordCount); i++ {
		l, k := binary.Varint(recs)
		if k <= 0 || l < 0 || int64(len(recs)-k) < l {
			return nil, fmt.Errorf("%w: record %d length", ErrCorruptBatch, i)
		}
		body := recs[k : k+int(l)]
		recs = recs[k+int(l):]
		r, err := decodeRecord(body, &h)
		if err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrCorruptBatch, i, err)
		}
		if logAppend {
			r.Timestamp = h.MaxTimestamp
		}
		out = append(out, r)
	}
	return out, nil
}

type recReader struct {
	b   []byte
	err error
}

func (r *recReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Varint(r.b)
	if k <= 0 {
		r.err = fmt.Errorf("bad varint")
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *recReader) bytes() []byte {
	l := r.varint()
	if r.err != nil || l < 0 {
		return nil
	}
	if int64(len(r.b)) < l {
		r.err = fmt.Errorf("short field")
		return nil
	}
	v := r.b[:l:l]
	r.b = r.b[l:]
	if v == nil {
		v = []byte{}
	}
	return v
}

func decodeRecord(body []byte, h *batchHeader) (Record, error) {
	if len(body) < 1 {
		return Record{}, fmt.Errorf("empty record")
	}
	r := recReader{b: body[1:]}
	tsDelta := r.varint()
	offDelta := r.varint()
	rec := Record{
		Offset:        h.BaseOffset + offDelta,
		Timestamp:     h.BaseTimestamp + tsDelta,
		ProducerID:    h.ProducerID,
		ProducerEpoch: h.ProducerEpoch,
		Transactional: h.Attributes&attrTransactional != 0,
		Control:       h.Attributes&attrControl != 0,
	}
	rec.Key = r.bytes()
	rec.Value = r.bytes()
	nh := r.varint()
	if r.err == nil && (nh < 0 || nh > int64(len(r.b))) {
		return rec, fmt.Errorf("bad header count %d", nh)
	}
	if nh > 0 {
		rec.Headers = make([]Header, 0, nh)
	}
	for i := int64(0); i < nh && r.err == nil; i++ {
		k := r.bytes()
		v := r.bytes()
		rec.Headers = append(rec.Headers, Header{Key: string(k), Value: v})
	}
	return rec, r.err
}
