package handler

import "encoding/binary"

// The few RecordBatch v2 header fields Produce reads before storage-core, which owns
// the format and is the one validator of produced records (storage.proto
// ChannelBatches, single_batch): batchLength (int32 at 8, the bytes after it), magic
// (int8 at 16), attributes (int16 at 21; 0x10 transactional, 0x20 control),
// producerId (int64 at 43), producerEpoch (int16 at 51); the header is 61 bytes.
const (
	batchHeaderLen   = 61
	batchLenOffset   = 8
	batchLenField    = 12 // bytes up to and including batchLength
	magicOffset      = 16
	attrOffset       = 21
	producerIDOffset = 43
	epochOffset      = 51
	attrTxnBit       = 0x10
	attrControlBit   = 0x20
)

// transactionalBatch reports whether records is one transactional batch that must be
// verified with the transaction coordinator before it is stored (KIP-890 part 1), and
// its producer id and epoch. It is only a reader, no validator: it says true exactly
// when records is one whole magic-2 frame (61 bytes or more, batchLength matching)
// whose attributes have the transactional bit and not the control bit. Everything
// else goes to storage-core unverified, which is safe because storage-core refuses it
// or it is not transactional:
//   - not exactly one whole magic-2 frame: storage-core refuses these very bytes
//     (single_batch: framing, magic, one batch), whatever they say;
//   - a control batch: storage-core refuses every control batch from a producer;
//   - no transactional bit: the batch is not transactional, or its bit was lost to
//     damage, and storage-core's CRC-32C (which covers attributes and the producer
//     fields) refuses a damaged batch.
//
// The CRC is not checked here, so a batch whose transactional bit or producer fields
// come from damage is verified with what it says: if the coordinator confirms it,
// storage-core still refuses it (bad CRC); if not, Produce asks storage-core to
// validate it (validate_only), so a corrupt batch is answered CORRUPT_MESSAGE either
// way. Nothing transactional is stored unverified.
func transactionalBatch(records []byte) (producerID int64, epoch int16, ok bool) {
	if len(records) < batchHeaderLen || records[magicOffset] != 2 ||
		int64(int32(binary.BigEndian.Uint32(records[batchLenOffset:])))+batchLenField != int64(len(records)) {
		return 0, 0, false
	}
	if attrs := binary.BigEndian.Uint16(records[attrOffset:]); attrs&attrTxnBit == 0 || attrs&attrControlBit != 0 {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(records[producerIDOffset:])), int16(binary.BigEndian.Uint16(records[epochOffset:])), true
}
