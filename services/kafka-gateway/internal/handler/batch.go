package handler

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kerr"
)

// RecordBatch v2 layout (Kafka's DefaultRecordBatch):
//
//	baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
//	crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
//	maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
//	recordCount int32 | records...
//
// batchLength counts the bytes after itself; the CRC-32C covers attributes to the end.
const (
	batchHeaderLen   = 61
	batchLenOffset   = 8
	magicOffset      = 16
	crcOffset        = 17
	attrOffset       = 21
	producerIDOffset = 43
	epochOffset      = 51
	attrTxnBit       = 0x10
	attrControlBit   = 0x20
	batchLogOverhead = 12
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// batchCheck is what checkBatches learned about a partition's records.
type batchCheck struct {
	code          int16 // Kafka error code; 0 when the records are acceptable
	transactional bool
	batches       int
	// Producer id and epoch of the last transactional batch (set with transactional).
	producerID    int64
	producerEpoch int16
}

// checkBatches validates the framing of the record batches a producer sent for one
// partition before they go to storage-core (which validates them again, CRC-32C
// included): every batch must be a complete magic-2 batch; a control or
// transactional batch must also have a correct CRC-32C.
//
//	null or empty records                        -> INVALID_RECORD (87)
//	short or overlong frame                      -> CORRUPT_MESSAGE (2)
//	bad CRC (here or in storage-core)            -> CORRUPT_MESSAGE (2)
//	magic other than 2                           -> INVALID_RECORD (87)
//	control batch from a producer                -> INVALID_RECORD (87)
func checkBatches(b []byte) batchCheck {
	var c batchCheck
	if len(b) == 0 {
		// Kafka (ProduceRequest.validateRecords, v3+): "must have at least one record
		// batch per partition", an InvalidRecordException. Null records pass that check
		// in Kafka only to fail later without a defined code; they hold no batch either.
		c.code = kerr.InvalidRecord.Code
		return c
	}
	for len(b) > 0 {
		if len(b) < batchLogOverhead+5 {
			c.code = kerr.CorruptMessage.Code
			return c
		}
		n := int64(int32(binary.BigEndian.Uint32(b[batchLenOffset:])))
		total := n + batchLogOverhead
		if n < 0 || total > int64(len(b)) {
			c.code = kerr.CorruptMessage.Code
			return c
		}
		if b[magicOffset] != 2 {
			c.code = kerr.InvalidRecord.Code
			return c
		}
		if total < batchHeaderLen {
			c.code = kerr.CorruptMessage.Code
			return c
		}
		batch := b[:total]
		attrs := binary.BigEndian.Uint16(batch[attrOffset:])
		// storage-core verifies every batch's CRC (CORRUPT_BATCH, answered as
		// CORRUPT_MESSAGE), so it is checked here only when the answer depends on the
		// attributes: a corrupt batch is CORRUPT_MESSAGE, not what its damaged bits
		// would say. One pass less over every produced byte on the common path.
		if attrs&(attrControlBit|attrTxnBit) != 0 && crc32.Checksum(batch[attrOffset:], castagnoli) != binary.BigEndian.Uint32(batch[crcOffset:]) {
			c.code = kerr.CorruptMessage.Code
			return c
		}
		if attrs&attrControlBit != 0 {
			c.code = kerr.InvalidRecord.Code
			return c
		}
		if attrs&attrTxnBit != 0 {
			c.transactional = true
			c.producerID = int64(binary.BigEndian.Uint64(batch[producerIDOffset:]))
			c.producerEpoch = int16(binary.BigEndian.Uint16(batch[epochOffset:]))
		}
		c.batches++
		b = b[total:]
	}
	return c
}
