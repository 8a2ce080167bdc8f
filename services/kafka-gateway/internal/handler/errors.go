package handler

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Sentinel errors. A handler returning one of them asks the server to close the
// connection (Kafka does the same for requests it cannot parse or serve).
var (
	// ErrUnsupportedAPI is returned for an API key the gateway does not serve.
	ErrUnsupportedAPI = errors.New("unsupported api key")
	// ErrUnsupportedVersion is returned for a version outside the registered range
	// (ApiVersions is answered instead, with UNSUPPORTED_VERSION).
	ErrUnsupportedVersion = errors.New("unsupported api version")
	// ErrAcksZeroFailed is returned for an acks=0 produce that failed on some
	// partition: the only way to tell the client is to close the connection.
	ErrAcksZeroFailed = errors.New("acks=0 produce failed")
	// ErrHandlerPanic is returned when a handler panicked (a bug): the connection is
	// closed, the process keeps serving.
	ErrHandlerPanic = errors.New("kafka handler panicked")
)

// storageCodes is the one table from storage-core's per-channel ErrorCode to Kafka error
// codes (the mapping is documented beside each value in storage.proto).
var storageCodes = map[storagev1.ErrorCode]int16{
	storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED:             0,
	storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND:       kerr.UnknownTopicOrPartition.Code,
	storagev1.ErrorCode_ERROR_CODE_CORRUPT_BATCH:           kerr.CorruptMessage.Code,
	storagev1.ErrorCode_ERROR_CODE_BATCH_TOO_LARGE:         kerr.MessageTooLarge.Code,
	storagev1.ErrorCode_ERROR_CODE_OUT_OF_ORDER_SEQUENCE:   kerr.OutOfOrderSequenceNumber.Code,
	storagev1.ErrorCode_ERROR_CODE_INVALID_PRODUCER_EPOCH:  kerr.InvalidProducerEpoch.Code,
	storagev1.ErrorCode_ERROR_CODE_SEQUENCE_OUT_OF_RANGE:   kerr.OffsetOutOfRange.Code,
	storagev1.ErrorCode_ERROR_CODE_INVALID_RECORD:          kerr.InvalidRecord.Code,
	storagev1.ErrorCode_ERROR_CODE_RESERVED_CHANNEL:        kerr.TopicAuthorizationFailed.Code,
	storagev1.ErrorCode_ERROR_CODE_STORAGE_FAILURE:         kerr.KafkaStorageError.Code,
	storagev1.ErrorCode_ERROR_CODE_INVALID_TIMESTAMP:       kerr.InvalidTimestamp.Code,
	storagev1.ErrorCode_ERROR_CODE_UNSUPPORTED_COMPRESSION: kerr.UnsupportedCompressionType.Code,
	storagev1.ErrorCode_ERROR_CODE_UNKNOWN_PRODUCER_ID:     kerr.UnknownProducerID.Code,
	storagev1.ErrorCode_ERROR_CODE_INVALID_TXN_STATE:       kerr.InvalidTxnState.Code,
	storagev1.ErrorCode_ERROR_CODE_NOT_LEADER:              kerr.NotLeaderForPartition.Code,
	storagev1.ErrorCode_ERROR_CODE_NOT_ENOUGH_REPLICAS:     kerr.NotEnoughReplicas.Code,
}

// storageCode maps a storage-core ErrorCode to a Kafka error code. An unknown (newer)
// value maps to KAFKA_STORAGE_ERROR, which clients retry, never UNKNOWN_SERVER_ERROR.
func storageCode(c storagev1.ErrorCode) int16 {
	if k, ok := storageCodes[c]; ok {
		return k
	}
	return kerr.KafkaStorageError.Code
}

// dataCode maps a failed storage-core call (a gRPC status) to a Kafka error code for the
// data path (Produce, Fetch, ListOffsets, DeleteRecords, OffsetForLeaderEpoch). Outages
// map to retriable codes that make clients refresh metadata and retry:
//
//	UNAVAILABLE, CANCELED, ABORTED -> NOT_LEADER_OR_FOLLOWER (6)
//	DEADLINE_EXCEEDED              -> REQUEST_TIMED_OUT (7)
//	NOT_FOUND                      -> UNKNOWN_TOPIC_OR_PARTITION (3)
//	OUT_OF_RANGE                   -> OFFSET_OUT_OF_RANGE (1)
//	PERMISSION_DENIED              -> TOPIC_AUTHORIZATION_FAILED (29)
//	INVALID_ARGUMENT               -> INVALID_REQUEST (42)
//	anything else                  -> KAFKA_STORAGE_ERROR (56)
func dataCode(err error) int16 {
	if err == nil {
		return 0
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return kerr.RequestTimedOut.Code
	}
	if errors.Is(err, context.Canceled) {
		return kerr.NotLeaderForPartition.Code
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled, codes.Aborted:
		return kerr.NotLeaderForPartition.Code
	case codes.DeadlineExceeded:
		return kerr.RequestTimedOut.Code
	case codes.NotFound:
		return kerr.UnknownTopicOrPartition.Code
	case codes.OutOfRange:
		return kerr.OffsetOutOfRange.Code
	case codes.PermissionDenied:
		return kerr.TopicAuthorizationFailed.Code
	case codes.InvalidArgument:
		return kerr.InvalidRequest.Code
	default:
		return kerr.KafkaStorageError.Code
	}
}

// controlCode maps a failed coordinator call (a gRPC status) to a Kafka error code for
// topic administration. Outages are REQUEST_TIMED_OUT (7), which admin clients retry.
//
//	UNAVAILABLE, DEADLINE_EXCEEDED, CANCELED, ABORTED -> REQUEST_TIMED_OUT (7)
//	NOT_FOUND                                          -> UNKNOWN_TOPIC_OR_PARTITION (3)
//	ALREADY_EXISTS                                     -> TOPIC_ALREADY_EXISTS (36)
//	INVALID_ARGUMENT                                   -> INVALID_REQUEST (42)
//	PERMISSION_DENIED                                  -> TOPIC_AUTHORIZATION_FAILED (29)
//	anything else                                      -> UNKNOWN_SERVER_ERROR (-1)
func controlCode(err error) int16 {
	if err == nil {
		return 0
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return kerr.RequestTimedOut.Code
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted:
		return kerr.RequestTimedOut.Code
	case codes.NotFound:
		return kerr.UnknownTopicOrPartition.Code
	case codes.AlreadyExists:
		return kerr.TopicAlreadyExists.Code
	case codes.InvalidArgument:
		return kerr.InvalidRequest.Code
	case codes.PermissionDenied:
		return kerr.TopicAuthorizationFailed.Code
	default:
		return kerr.UnknownServerError.Code
	}
}

// errMessage returns a pointer to err's message for the ErrorMessage fields, or nil.
func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	if st, ok := status.FromError(err); ok {
		s = st.Message()
	}
	return &s
}

// strPtr returns a pointer to s, or nil when s is empty.
func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// status503 is the error used when a backend client is not configured.
func status503() error { return status.Error(codes.Unavailable, "backend not configured") }
