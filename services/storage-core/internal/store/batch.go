package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tributary/tributary/libs/kafkabatch"
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
	batchHeaderLen          = 61
	batchLengthField        = 12 // bytes before and including batchLength
	offBatchLength          = 8
	offPartitionLeaderEpoch = 12
	offMagic                = 16
	offCRC                  = 17
	offAttributes           = 21
	offLastDelta            = 23
	offBaseTS               = 27
	offMaxTS                = 35
	offProducerID           = 43
	offProducerEpoch        = 51
	offBaseSequence         = 53
	offRecordCount          = 57

	attrCompressionMask = 0x07
	attrTimestampType   = 0x08 // 1 = LogAppendTime
	attrTransactional   = 0x10
	attrControl         = 0x20
	// attrDeleteHorizon marks a batch whose base timestamp is its delete horizon, set
	// by the log cleaner (KIP-534; Kafka DefaultRecordBatch.DELETE_HORIZON_FLAG_MASK).
	attrDeleteHorizon = 0x40
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
	// minTS and maxTS are the smallest and largest record timestamps (BaseTimestamp
	// plus the record's delta) other than -1 (no timestamp), set by checkFrame;
	// hasTS reports whether there is one.
	minTS, maxTS int64
	hasTS        bool
	// nullKey is 1 + the index of the first record with a null key, 0 when none; set
	// by checkFrame.
	nullKey int32
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

// headerUpToMagic is the bytes of a frame up to and including magic: baseOffset,
// batchLength, partitionLeaderEpoch, magic.
const headerUpToMagic = offMagic + 1

// checkFraming is an append's first pass over its frames b, before any frame is
// checked in depth (checkFrame), in the order Kafka checks a Produce request's records
// (ProduceRequest.validateRecords over the batch iterator). Per frame: its framing
// (the bytes up to magic, then a batch length that fits in b), a magic of a Kafka
// message format (0..2), magic 2, a whole header; the CRC-32C of a transactional or control frame, because those bits decide
// what follows (a control frame is refused here; a transactional one was checked
// against its transaction by kafka-gateway before it came), so a damaged frame is
// corrupt, not what its damaged bits say; no control frame. Then, with single (Kafka
// Produce v3+), exactly one frame. Errors:
//
//	empty b                                -> ErrInvalidRecord with single, else ErrCorruptBatch
//	short or overlong frame                -> ErrCorruptBatch
//	magic outside 0..2 (no such format)    -> ErrCorruptBatch
//	magic 0 or 1                           -> ErrInvalidRecord
//	bad CRC of a transactional or control  -> ErrCorruptBatch (of any other: checkFrame)
//	control frame (clients may not write)  -> ErrInvalidRecord
//	more than one frame with single        -> ErrInvalidRecord
func checkFraming(b []byte, single bool) error {
	if len(b) == 0 {
		if single {
			// Kafka: "must have at least one record batch per partition".
			return fmt.Errorf("%w: no record batch", ErrInvalidRecord)
		}
		return fmt.Errorf("%w: no batches", ErrCorruptBatch)
	}
	frames := 0
	for len(b) > 0 {
		if len(b) < headerUpToMagic {
			return fmt.Errorf("%w: %d bytes, shorter than a batch header", ErrCorruptBatch, len(b))
		}
		bl := int32(binary.BigEndian.Uint32(b[offBatchLength:]))
		n := int64(bl) + batchLengthField
		if bl < 0 || n > int64(len(b)) {
			return fmt.Errorf("%w: batch length %d past the end (%d bytes left)", ErrCorruptBatch, bl, len(b))
		}
		if m := int8(b[offMagic]); m < 0 || m > 2 {
			// Kafka ByteBufferLogInputStream: no message format has this magic.
			return fmt.Errorf("%w: magic %d", ErrCorruptBatch, m)
		}
		if b[offMagic] != 2 {
			return fmt.Errorf("%w: magic %d, only RecordBatch v2 is accepted", ErrInvalidRecord, b[offMagic])
		}
		if n < batchHeaderLen {
			return fmt.Errorf("%w: batch length %d", ErrCorruptBatch, bl)
		}
		frame := b[:n]
		attrs := binary.BigEndian.Uint16(frame[offAttributes:])
		if attrs&(attrControl|attrTransactional) != 0 && crc32.Checksum(frame[offAttributes:], castagnoli) != binary.BigEndian.Uint32(frame[offCRC:]) {
			return fmt.Errorf("%w: CRC mismatch", ErrCorruptBatch)
		}
		if attrs&attrControl != 0 {
			return fmt.Errorf("%w: clients may not write control batches", ErrInvalidRecord)
		}
		frames++
		b = b[n:]
	}
	if single && frames > 1 {
		return fmt.Errorf("%w: %d record batches, exactly one is allowed", ErrInvalidRecord, frames)
	}
	return nil
}

// checkFrame validates one frame (exactly one batch in b, which checkFraming passed)
// as Kafka's LogValidator does at produce time: CRC, record count, producer fields,
// and every record parsed (compressed batches decompressed, to at most
// maxDecompressed bytes): framing, field lengths, offset deltas exactly 0..n-1. It
// returns the parsed header. Errors: ErrCorruptBatch (CRC, lengths, count,
// undecodable compression: Kafka CORRUPT_MESSAGE), ErrInvalidRecord (offset deltas,
// record fields, producer fields: Kafka INVALID_RECORD), ErrUnsupportedCompression.
// Uncompressed records are parsed in place without allocating; compressed ones are
// decompressed into pooled buffers.
func checkFrame(b []byte, maxDecompressed int) (batchHeader, error) {
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
	if err := checkProducerFields(&h); err != nil {
		return h, err
	}
	codec := h.Attributes & attrCompressionMask
	switch {
	case codec > 4:
		return h, fmt.Errorf("%w: codec %d", ErrUnsupportedCompression, codec)
	case codec == 0:
		if err := validateRecords(b[batchHeaderLen:], &h); err != nil {
			return h, err
		}
	default:
		buf := getDecBuf()
		defer putDecBuf(buf)
		recs, err := decompressInto((*buf)[:0], b[batchHeaderLen:], codec, maxDecompressed)
		if recs != nil {
			*buf = recs[:0]
		}
		if err != nil {
			return h, fmt.Errorf("%w: decompress: %v", ErrCorruptBatch, err)
		}
		if err := validateRecords(recs, &h); err != nil {
			return h, err
		}
	}
	return h, nil
}

// checkProducerFields applies Kafka's batch checks on client-written batches
// (LogValidator.validateBatch, ProducerStateManager; control batches were refused by
// checkFraming): a producer id below 0 means none, as in Kafka, whose RecordBatch.hasProducerId is
// "producerId > NO_PRODUCER_ID (-1)": -5 is taken and stored as sent, without
// idempotence, like -1. Without a producer id the batch is not transactional (its base
// sequence is not looked at: franz-go writes 0 there when idempotence is off, and
// Kafka takes it); with one the base sequence is >= 0.
func checkProducerFields(h *batchHeader) error {
	switch {
	case h.ProducerID < 0 && h.Attributes&attrTransactional != 0:
		return fmt.Errorf("%w: transactional batch without a producer id", ErrInvalidRecord)
	case h.ProducerID >= 0 && h.BaseSequence < 0:
		return fmt.Errorf("%w: base sequence %d for producer %d", ErrInvalidRecord, h.BaseSequence, h.ProducerID)
	}
	return nil
}

// validateRecords parses a batch's records section in place (no allocation): exactly
// want records, each a varint length then a body that validateRecord accepts, filling
// recs exactly.
func validateRecords(recs []byte, h *batchHeader) error {
	want := h.RecordCount
	n := int32(0)
	for len(recs) > 0 {
		if n == want {
			return fmt.Errorf("%w: header says %d records, %d bytes remain after them", ErrCorruptBatch, want, len(recs))
		}
		l, k := binary.Varint(recs)
		if k <= 0 || l < 0 || int64(len(recs)-k) < l {
			return fmt.Errorf("%w: record %d has a bad length", ErrCorruptBatch, n)
		}
		tsDelta, nullKey, err := validateRecord(recs[k:k+int(l)], n)
		if err != nil {
			return err
		}
		if nullKey && h.nullKey == 0 {
			h.nullKey = n + 1
		}
		// Kafka adds the delta to the base timestamp (wrapping) and skips -1 in its
		// limits check; the limits are monotone in the timestamp, so checking the
		// smallest and largest of the others checks them all.
		if ts := h.BaseTimestamp + tsDelta; ts != -1 {
			if !h.hasTS || ts < h.minTS {
				h.minTS = ts
			}
			if !h.hasTS || ts > h.maxTS {
				h.maxTS = ts
			}
			h.hasTS = true
		}
		recs = recs[k+int(l):]
		n++
	}
	if n != want {
		return fmt.Errorf("%w: header says %d records, found %d", ErrCorruptBatch, want, n)
	}
	return nil
}

// validateRecord checks one record body (Kafka DefaultRecord.readFrom): attributes,
// timestamp delta, offset delta == i, key and value (length -1 = null), header count
// >= 0, header keys non-null, and no bytes left over, and returns its timestamp delta
// and whether its key is null. Errors wrap ErrInvalidRecord.
func validateRecord(body []byte, i int32) (int64, bool, error) {
	if len(body) < 1 {
		return 0, false, fmt.Errorf("%w: record %d is empty", ErrInvalidRecord, i)
	}
	r := recReader{b: body[1:]}
	tsDelta := r.varint()
	if od := r.varint(); r.err == nil && od != int64(i) {
		return 0, false, fmt.Errorf("%w: record %d has offset delta %d", ErrInvalidRecord, i, od)
	}
	// A null key is length varint -1, the byte 1.
	nullKey := r.err == nil && len(r.b) > 0 && r.b[0] == 1
	_ = r.bytes() // key
	_ = r.bytes() // value
	nh := r.varint()
	if r.err == nil && (nh < 0 || nh > int64(len(r.b))) {
		return 0, false, fmt.Errorf("%w: record %d has header count %d", ErrInvalidRecord, i, nh)
	}
	for j := int64(0); j < nh && r.err == nil; j++ {
		if kl, _ := binary.Varint(r.b); kl < 0 {
			return 0, false, fmt.Errorf("%w: record %d header %d has a null key", ErrInvalidRecord, i, j)
		}
		_ = r.bytes()
		_ = r.bytes()
	}
	if r.err != nil {
		return 0, false, fmt.Errorf("%w: record %d: %v", ErrInvalidRecord, i, r.err)
	}
	if len(r.b) != 0 {
		return 0, false, fmt.Errorf("%w: record %d has %d bytes past its fields", ErrInvalidRecord, i, len(r.b))
	}
	return tsDelta, nullKey, nil
}

// setLogAppendTime marks a batch as LogAppendTime with max timestamp ts (ms) and
// recomputes its CRC, as Kafka's LogValidator does.
func setLogAppendTime(b []byte, ts int64) {
	attrs := binary.BigEndian.Uint16(b[offAttributes:]) | attrTimestampType
	binary.BigEndian.PutUint16(b[offAttributes:], attrs)
	binary.BigEndian.PutUint64(b[offMaxTS:], uint64(ts))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
}

// setCreateTime makes the header of a producer's frame b (h, from checkFrame) say
// CreateTime with the largest record timestamp as its max timestamp (-1 when none is
// above -1), recomputing the CRC only when that changes it, as Kafka's LogValidator
// does in place: the producer's timestamp type bit and max timestamp are not trusted,
// because reads give every record of a LogAppendTime batch its max timestamp and the
// time index and retention go by the max timestamp.
func setCreateTime(b []byte, h *batchHeader) {
	maxTS := int64(-1)
	if h.hasTS {
		maxTS = max(h.maxTS, -1)
	}
	if h.Attributes&attrTimestampType == 0 && h.MaxTimestamp == maxTS {
		return
	}
	h.Attributes &^= attrTimestampType
	h.MaxTimestamp = maxTS
	binary.BigEndian.PutUint16(b[offAttributes:], uint16(h.Attributes))
	binary.BigEndian.PutUint64(b[offMaxTS:], uint64(maxTS))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
}

// Header is one record header; repeated keys are kept in order. Key is UTF-8: a
// decoded key's bytes that are not (Kafka does not check header keys, and serves them
// to Kafka consumers as sent) are replaced with U+FFFD, because decoded records go out
// as proto strings (Read, Subscribe, Receive), which proto refuses to marshal otherwise,
// failing the whole answer.
type Header = kafkabatch.Header

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

// stampProducer writes p's identity into the encoded batch b and recomputes its CRC.
func stampProducer(b []byte, p *Producer) {
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(p.ID))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], uint16(p.Epoch))
	binary.BigEndian.PutUint32(b[offBaseSequence:], uint32(p.BaseSequence))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
}

func appendVarBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(b, -1)
	}
	b = binary.AppendVarint(b, int64(len(v)))
	return append(b, v...)
}

// DecodeBatch decodes the records of one stored frame, decompressing gzip, snappy (raw
// or xerial framed), lz4 (frame) and zstd, after verifying its CRC-32C. Records of a
// LogAppendTime batch get the batch's max timestamp. The returned slices alias b or the
// decompressed buffer. Every error wraps ErrDataLoss: stored frames were validated at
// append, so one that fails here was damaged on disk.
func DecodeBatch(b []byte) ([]Record, error) {
	return decodeBatchFrom(b, math.MinInt64, math.MaxInt, math.MaxInt)
}

// decodeBatchFrom is DecodeBatch returning only records at offset >= from, and stopping
// once maxRecords records are decoded or their keys, values and headers reach maxBytes
// (the record crossing maxBytes is included), so a small read of a batch of many
// records does not decode them all.
func decodeBatchFrom(b []byte, from int64, maxRecords, maxBytes int) ([]Record, error) {
	return appendBatch(nil, b, from, maxRecords, maxBytes)
}

// appendBatch is decodeBatchFrom appending to out (nil: a slice sized for the batch).
// The records' header slices share allocations of their batch, and header keys
// repeated across its records share one string (decodeScratch).
func appendBatch(out []Record, b []byte, from int64, maxRecords, maxBytes int) ([]Record, error) {
	n, err := frameLen(b)
	if err != nil {
		return out, fmt.Errorf("%w: %v", ErrDataLoss, err)
	}
	b = b[:n]
	if b[offMagic] != 2 {
		return out, fmt.Errorf("%w: magic %d", ErrDataLoss, b[offMagic])
	}
	if crc32.Checksum(b[offAttributes:], castagnoli) != binary.BigEndian.Uint32(b[offCRC:]) {
		return out, fmt.Errorf("%w: CRC mismatch in the batch at offset %d", ErrDataLoss, int64(binary.BigEndian.Uint64(b)))
	}
	h := parseHeader(b)
	recs := b[batchHeaderLen:]
	if codec := h.Attributes & attrCompressionMask; codec != 0 {
		if codec > 4 {
			return out, fmt.Errorf("%w: codec %d", ErrDataLoss, codec)
		}
		recs, err = decompress(recs, codec)
		if err != nil {
			return out, fmt.Errorf("%w: decompress: %v", ErrDataLoss, err)
		}
	}
	// Size the slice by what is wanted and what the bytes can hold (>= 7 bytes a record).
	want := min(max(int(h.RecordCount), 0), len(recs)/7+1, maxRecords)
	if out == nil {
		out = make([]Record, 0, want)
	} else {
		out = slices.Grow(out, want)
	}
	logAppend := h.Attributes&attrTimestampType != 0
	// A cleaned batch (cleaner.go) holds fewer records than its offset range: its
	// records' offsets come from their offset deltas.
	sparse := h.RecordCount != h.LastOffsetDelta+1
	size := 0
	var sc decodeScratch
	for i, got := 0, 0; i < int(h.RecordCount) && got < maxRecords && size < maxBytes; i++ {
		l, k := binary.Varint(recs)
		if k <= 0 || l < 0 || int64(len(recs)-k) < l {
			return out, fmt.Errorf("%w: record %d length", ErrDataLoss, i)
		}
		body := recs[k : k+int(l)]
		recs = recs[k+int(l):]
		off := h.BaseOffset + int64(i) // offset deltas are 0..n-1 (checked at append)
		if sparse {
			if off = sparseOffset(body, h.BaseOffset); off < 0 {
				return out, fmt.Errorf("%w: record %d offset delta", ErrDataLoss, i)
			}
		}
		if off < from {
			continue
		}
		r, err := decodeRecord(body, &h, off, &sc)
		if err != nil {
			return out, fmt.Errorf("%w: record %d: %v", ErrDataLoss, i, err)
		}
		if logAppend {
			r.Timestamp = h.MaxTimestamp
		}
		out = append(out, r)
		got++
		size += len(r.Key) + len(r.Value)
		for _, hd := range r.Headers {
			size += len(hd.Key) + len(hd.Value)
		}
	}
	return out, nil
}

// decodeScratch is what the records of one batch share while decoded: header slices
// are cut from one allocation, and header keys seen before in the batch are reused
// rather than allocated again (records of one producer mostly carry the same keys).
type decodeScratch struct {
	keys  [8]string
	nkeys int
	hdrs  []Header // free room for header slices
}

// headers returns an empty slice with room for n headers, n > 0.
func (sc *decodeScratch) headers(n int) []Header {
	if cap(sc.hdrs)-len(sc.hdrs) < n {
		sc.hdrs = make([]Header, 0, max(n, 64))
	}
	l := len(sc.hdrs)
	sc.hdrs = sc.hdrs[:l+n]
	return sc.hdrs[l : l : l+n]
}

// key returns k as a string, the batch's earlier one when it has the same bytes, with
// U+FFFD for each run of bytes that is not UTF-8 (Header.Key).
func (sc *decodeScratch) key(k []byte) string {
	for _, s := range sc.keys[:sc.nkeys] {
		if s == string(k) {
			return s
		}
	}
	s := string(k)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if sc.nkeys < len(sc.keys) {
		sc.keys[sc.nkeys] = s
		sc.nkeys++
	}
	return s
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

// decodeRecord decodes a record of a batch at offset off (the batch's base offset + its
// index, the offset delta checked to be the index at append and not trusted again; a
// cleaned batch's offset delta, see appendBatch).
func decodeRecord(body []byte, h *batchHeader, off int64, sc *decodeScratch) (Record, error) {
	if len(body) < 1 {
		return Record{}, fmt.Errorf("empty record")
	}
	r := recReader{b: body[1:]}
	tsDelta := r.varint()
	_ = r.varint() // offset delta
	rec := Record{
		Offset:        off,
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
		rec.Headers = sc.headers(int(nh))
	}
	for i := int64(0); i < nh && r.err == nil; i++ {
		k := r.bytes()
		v := r.bytes()
		rec.Headers = append(rec.Headers, Header{Key: sc.key(k), Value: v})
	}
	return rec, r.err
}
