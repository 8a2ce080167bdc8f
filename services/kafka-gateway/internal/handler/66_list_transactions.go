package handler

// ListTransactions (API key 66), versions 0-1.
//
// Behaviour: passed to the coordinator's transaction coordinator: every transactional
// id with its producer id and state, filtered by state names (unknown names are
// returned in UnknownStateFilters and match nothing), producer ids, and (v1, KIP-994)
// duration: only transactions open for at least DurationFilterMillis (-1: no filter).
// Coordinator outage: COORDINATOR_NOT_AVAILABLE. v2 (KIP-1152 transactional id
// pattern) is not served.
//
// With the authorizer on: only the transactional ids the principal may DESCRIBE.
//
// KIPs: KIP-664, KIP-994 (v1).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.ListTransactions.Int16(), 0, 1, (*Handler).handleListTransactions) }

func (h *Handler) handleListTransactions(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.ListTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	creq := &coordinatorv1.ListTransactionsRequest{States: req.StateFilters, ProducerIds: req.ProducerIDFilters, MinDurationMs: -1}
	if req.Version >= 1 {
		creq.MinDurationMs = req.DurationFilterMillis
	}
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.txns.ListTransactions(cctx, creq)
	if err != nil {
		resp.ErrorCode = h.txnCode("ListTransactions", err)
		return resp, nil
	}
	resp.UnknownStateFilters = out.GetUnknownStates()
	acc := h.access(ctx, r)
	for _, x := range out.GetTransactions() {
		if !acc.txnID(kafkaacl.OpDescribe, x.GetTransactionalId()) {
			continue
		}
		st := kmsg.NewListTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.TransactionState = x.GetTransactionalId(), x.GetProducerId(), x.GetState()
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp, nil
}
