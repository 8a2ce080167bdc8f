package handler

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// Transaction calls (InitProducerId with a transactional id, AddPartitionsToTxn,
// AddOffsetsToTxn, EndTxn, TxnOffsetCommit, and the Produce check of transactional
// batches) go to the coordinator's TransactionCoordinatorService, which keeps every
// transactional id's state in Postgres, so any gateway replica serves any id.

// txnCode maps a failed TransactionCoordinatorService call to a Kafka error code:
// COORDINATOR_NOT_AVAILABLE (15), which clients answer by looking the coordinator up
// again and retrying.
func (h *Handler) txnCode(api string, err error) int16 {
	h.log.Warn("coordinator transaction call failed", zap.String("api", api), zap.Error(err))
	return kerr.CoordinatorNotAvailable.Code
}

// fenced returns the code to answer for a coordinator code at a request version:
// PRODUCER_FENCED (90) became an error of its own in KIP-588; versions below since
// get INVALID_PRODUCER_EPOCH (47) instead, as Kafka's KafkaApis does.
func fenced(code int32, version, since int16) int16 {
	if code == int32(kerr.ProducerFenced.Code) && version < since {
		return kerr.InvalidProducerEpoch.Code
	}
	return int16(code)
}

// txnsOrUnavailable returns c, or a client answering every call UNAVAILABLE when c is
// nil (a gateway built without a coordinator connection, as in unit tests).
func txnsOrUnavailable(c coordinatorv1.TransactionCoordinatorServiceClient) coordinatorv1.TransactionCoordinatorServiceClient {
	if c == nil {
		return unavailableTxns{}
	}
	return c
}

// unavailableTxns answers every transaction call with UNAVAILABLE.
type unavailableTxns struct{}

func (unavailableTxns) AddPartitionsToTxn(context.Context, *coordinatorv1.AddPartitionsToTxnRequest, ...grpc.CallOption) (*coordinatorv1.AddPartitionsToTxnResponse, error) {
	return nil, status503()
}

func (unavailableTxns) AddOffsetsToTxn(context.Context, *coordinatorv1.AddOffsetsToTxnRequest, ...grpc.CallOption) (*coordinatorv1.AddOffsetsToTxnResponse, error) {
	return nil, status503()
}

func (unavailableTxns) EndTxn(context.Context, *coordinatorv1.EndTxnRequest, ...grpc.CallOption) (*coordinatorv1.EndTxnResponse, error) {
	return nil, status503()
}

func (unavailableTxns) TxnOffsetCommit(context.Context, *coordinatorv1.TxnOffsetCommitRequest, ...grpc.CallOption) (*coordinatorv1.TxnOffsetCommitResponse, error) {
	return nil, status503()
}

func (unavailableTxns) DescribeTransactions(context.Context, *coordinatorv1.DescribeTransactionsRequest, ...grpc.CallOption) (*coordinatorv1.DescribeTransactionsResponse, error) {
	return nil, status503()
}

func (unavailableTxns) ListTransactions(context.Context, *coordinatorv1.ListTransactionsRequest, ...grpc.CallOption) (*coordinatorv1.ListTransactionsResponse, error) {
	return nil, status503()
}
