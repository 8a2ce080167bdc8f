package handler

// DescribeTransactions (API key 65), version 0.
//
// Behaviour: passed to the coordinator's transaction coordinator: per transactional id
// its state (Kafka's names: Empty, Ongoing, PrepareCommit, PrepareAbort,
// CompleteCommit, CompleteAbort), timeout, the start of its open transaction (-1 when
// none), producer id and epoch, and the partitions of its open transaction. An unknown
// id is TRANSACTIONAL_ID_NOT_FOUND, an empty one INVALID_REQUEST; a coordinator outage
// COORDINATOR_NOT_AVAILABLE on every id.
//
// With the authorizer on: DESCRIBE on each transactional id, else
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED; partitions of topics the principal may not
// DESCRIBE are left out.
//
// KIPs: KIP-664.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.DescribeTransactions.Int16(), 0, 0, (*Handler).handleDescribeTransactions) }

func (h *Handler) handleDescribeTransactions(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DescribeTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.txns.DescribeTransactions(cctx, &coordinatorv1.DescribeTransactionsRequest{TransactionalIds: req.TransactionalIDs})
	var failed int16
	if err != nil {
		failed = h.txnCode("DescribeTransactions", err)
	}
	ds := out.GetTransactions()
	x := h.access(ctx, r)
	for i, id := range req.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID, st.StartTimestamp, st.ProducerID, st.ProducerEpoch = id, -1, -1, -1
		if !x.txnID(kafkaacl.OpDescribe, id) {
			st.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
			resp.TransactionStates = append(resp.TransactionStates, st)
			continue
		}
		if err != nil || i >= len(ds) {
			st.ErrorCode = failed
			if err == nil {
				st.ErrorCode = kerr.CoordinatorNotAvailable.Code
			}
			resp.TransactionStates = append(resp.TransactionStates, st)
			continue
		}
		d := ds[i]
		st.ErrorCode = int16(d.GetErrorCode())
		if st.ErrorCode == 0 {
			st.State, st.TimeoutMillis, st.StartTimestamp = d.GetState(), d.GetTimeoutMs(), d.GetStartTimeMs()
			st.ProducerID, st.ProducerEpoch = d.GetProducerId(), int16(d.GetProducerEpoch())
			for _, t := range d.GetTopics() {
				if !x.topic(kafkaacl.OpDescribe, t.GetName()) {
					continue
				}
				rt := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
				rt.Topic, rt.Partitions = t.GetName(), t.GetPartitions()
				st.Topics = append(st.Topics, rt)
			}
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp, nil
}
