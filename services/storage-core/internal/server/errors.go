package server

import (
	"context"
	"errors"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/storage-core/internal/queue"
	"github.com/tributary/tributary/services/storage-core/internal/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrConfig is returned by New for an invalid Config.
var ErrConfig = errors.New("invalid config")

// ErrQueueChannel: a StorageService call that would change a queue's log (append,
// config, delete records); a queue's log is written by its bindings only.
// FAILED_PRECONDITION (per channel RESERVED_CHANNEL).
var ErrQueueChannel = errors.New("channel is a queue")

// errorTable maps engine and name errors to the per-channel ErrorCode of multi-channel
// calls and to the gRPC status code of single-channel calls. First match wins.
var errorTable = []struct {
	err  error
	code storagev1.ErrorCode
	grpc codes.Code
}{
	{store.ErrDataLoss, storagev1.ErrorCode_ERROR_CODE_STORAGE_FAILURE, codes.DataLoss}, // before the batch errors it may wrap
	{channel.ErrReserved, storagev1.ErrorCode_ERROR_CODE_RESERVED_CHANNEL, codes.PermissionDenied},
	{channel.ErrInvalidName, storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND, codes.InvalidArgument},
	{store.ErrNotFound, storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND, codes.NotFound},
	{queue.ErrNotFound, storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND, codes.NotFound},
	{queue.ErrSnapshotNotFound, storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND, codes.NotFound},
	{queue.ErrExists, storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED, codes.AlreadyExists},
	{queue.ErrSnapshotExists, storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED, codes.AlreadyExists},
	{queue.ErrInvalidArgument, storagev1.ErrorCode_ERROR_CODE_INVALID_RECORD, codes.InvalidArgument},
	{queue.ErrDetached, storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED, codes.FailedPrecondition},
	{queue.ErrNotQueue, storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED, codes.FailedPrecondition},
	{queue.ErrSnapshotMismatch, storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED, codes.FailedPrecondition},
	{ErrQueueChannel, storagev1.ErrorCode_ERROR_CODE_RESERVED_CHANNEL, codes.FailedPrecondition},
	{queue.ErrState, storagev1.ErrorCode_ERROR_CODE_STORAGE_FAILURE, codes.Unavailable},
	{queue.ErrClosed, storagev1.ErrorCode_ERROR_CODE_STORAGE_FAILURE, codes.Unavailable},
	{store.ErrClosed, storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND, codes.Unavailable},
	{store.ErrExists, storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED, codes.AlreadyExists},
	{store.ErrCorruptBatch, storagev1.ErrorCode_ERROR_CODE_CORRUPT_BATCH, codes.InvalidArgument},
	{store.ErrInvalidRecord, storagev1.ErrorCode_ERROR_CODE_INVALID_RECORD, codes.InvalidArgument},
	{store.ErrBatchTooLarge, storagev1.ErrorCode_ERROR_CODE_BATCH_TOO_LARGE, codes.InvalidArgument},
	{store.ErrInvalidTimestamp, storagev1.ErrorCode_ERROR_CODE_INVALID_TIMESTAMP, codes.InvalidArgument},
	{store.ErrUnsupportedCompression, storagev1.ErrorCode_ERROR_CODE_UNSUPPORTED_COMPRESSION, codes.InvalidArgument},
	{store.ErrOutOfOrderSequence, storagev1.ErrorCode_ERROR_CODE_OUT_OF_ORDER_SEQUENCE, codes.FailedPrecondition},
	{store.ErrInvalidProducerEpoch, storagev1.ErrorCode_ERROR_CODE_INVALID_PRODUCER_EPOCH, codes.FailedPrecondition},
	{store.ErrInvalidTxnState, storagev1.ErrorCode_ERROR_CODE_INVALID_TXN_STATE, codes.FailedPrecondition},
	{store.ErrOutOfRange, storagev1.ErrorCode_ERROR_CODE_SEQUENCE_OUT_OF_RANGE, codes.OutOfRange},
	{store.ErrInvalidArgument, storagev1.ErrorCode_ERROR_CODE_INVALID_RECORD, codes.InvalidArgument},
	{store.ErrStorage, storagev1.ErrorCode_ERROR_CODE_STORAGE_FAILURE, codes.Unavailable},
	// Raft mode: a per-channel NOT_LEADER carries the leader (setLeader); a single-channel
	// call gets the leader trailers (leader.go).
	{store.ErrNotLeader, storagev1.ErrorCode_ERROR_CODE_NOT_LEADER, codes.FailedPrecondition},
	{store.ErrNotReplicated, storagev1.ErrorCode_ERROR_CODE_NOT_ENOUGH_REPLICAS, codes.Unavailable},
	{store.ErrInternal, storagev1.ErrorCode_ERROR_CODE_STORAGE_FAILURE, codes.Internal},
	{context.Canceled, storagev1.ErrorCode_ERROR_CODE_STORAGE_FAILURE, codes.Canceled},
	{context.DeadlineExceeded, storagev1.ErrorCode_ERROR_CODE_STORAGE_FAILURE, codes.DeadlineExceeded},
}

// errorCode maps err to a per-channel ErrorCode (STORAGE_FAILURE when unknown).
func errorCode(err error) storagev1.ErrorCode {
	if err == nil {
		return storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED
	}
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return storagev1.ErrorCode_ERROR_CODE_STORAGE_FAILURE
}

// toStatus maps err to a gRPC status error (INTERNAL when unknown).
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if st, ok := notLeader(err); ok {
		return st
	}
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return status.Error(e.grpc, err.Error())
		}
	}
	return status.Error(codes.Internal, err.Error())
}
