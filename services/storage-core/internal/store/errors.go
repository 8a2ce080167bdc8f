package store

import (
	"errors"
	"fmt"
)

// Sentinel errors of the log engine. Callers match them with errors.Is; the gRPC edge
// (internal/server) maps each to a status code and a storagev1.ErrorCode.
var (
	// ErrNotFound: the channel does not exist.
	ErrNotFound = errors.New("channel not found")
	// ErrExists: the channel already exists (CreateChannel).
	ErrExists = errors.New("channel already exists")
	// ErrInvalidArgument: a bad argument (config value, bounds, record count).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrCorruptBatch: a RecordBatch frame failed validation (length, CRC, record count).
	ErrCorruptBatch = errors.New("corrupt record batch")
	// ErrInvalidRecord: a frame that is not a RecordBatch v2 (magic != 2) or is malformed
	// in a way Kafka reports as INVALID_RECORD (e.g. no records).
	ErrInvalidRecord = errors.New("invalid record")
	// ErrInvalidTimestamp: a record timestamp of a CreateTime channel further from the
	// append time than timestamp_before_max_ms / timestamp_after_max_ms allow.
	ErrInvalidTimestamp = errors.New("record timestamp out of range")
	// ErrBatchTooLarge: a batch larger than the channel's max_message_bytes.
	ErrBatchTooLarge = errors.New("batch larger than max_message_bytes")
	// ErrOutOfOrderSequence: an idempotent producer's sequence is not the next expected.
	ErrOutOfOrderSequence = errors.New("out of order sequence number")
	// ErrInvalidProducerEpoch: an idempotent producer's epoch is older than the known one.
	ErrInvalidProducerEpoch = errors.New("invalid producer epoch")
	// ErrOutOfRange: a read before the log start or past the high watermark + 1.
	ErrOutOfRange = errors.New("sequence out of range")
	// ErrUnsupportedCompression: a batch uses a compression codec we cannot decode.
	ErrUnsupportedCompression = errors.New("unsupported compression")
	// ErrStorage: a disk failure; the channel is fenced until restart.
	ErrStorage = errors.New("storage failure")
	// ErrClosed: the store or channel is closed (shutdown or channel deleted).
	ErrClosed = errors.New("closed")
	// ErrDataLoss: stored data failed to decode or verify (CRC, record structure); the
	// bytes on disk are damaged. gRPC DATA_LOSS, per-channel STORAGE_FAILURE.
	ErrDataLoss = errors.New("stored data is corrupt")
	// ErrInternal: an inconsistency the caller cannot fix (e.g. a channel's directory
	// already holds another channel's data). gRPC INTERNAL.
	ErrInternal = errors.New("internal error")
)

// ErrInvalidTxnState: a non-transactional batch of a producer with an open
// transaction on the channel (Kafka INVALID_TXN_STATE, 48;
// ProducerAppendInfo.appendDataBatch).
var ErrInvalidTxnState = errors.New("invalid transaction state")

// RecordError is an ErrInvalidRecord for one record of a batch: Index is its position
// in the batch (Kafka ProduceResponse record_errors batch_index), e.g. a record without
// a key appended to a compacted channel (Kafka LogValidator).
type RecordError struct {
	Index int32
	Msg   string
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("%v: record %d: %s", ErrInvalidRecord, e.Index, e.Msg)
}

// Unwrap makes a RecordError an ErrInvalidRecord.
func (e *RecordError) Unwrap() error { return ErrInvalidRecord }
