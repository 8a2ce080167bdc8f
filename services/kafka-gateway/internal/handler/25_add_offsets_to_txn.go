package handler

// AddOffsetsToTxn (API key 25), versions 0-4.
//
// Behaviour: passed to the coordinator's transaction coordinator, which adds the
// consumer group to the producer's transaction (making it Ongoing), so that
// TxnOffsetCommit may stage the group's offsets in it. Codes: INVALID_GROUP_ID (empty
// group), INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before
// v2, KIP-588), CONCURRENT_TRANSACTIONS (retriable). Coordinator outage:
// COORDINATOR_NOT_AVAILABLE.
//
// With the authorizer on: WRITE on the transactional id (else
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (else
// GROUP_AUTHORIZATION_FAILED).
//
// KIPs: KIP-98, KIP-482 (flexible v3+), KIP-588, KIP-890 (v4 TRANSACTION_ABORTABLE:
// not answered).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.AddOffsetsToTxn.Int16(), 0, 4, (*Handler).handleAddOffsetsToTxn) }

func (h *Handler) handleAddOffsetsToTxn(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.AddOffsetsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	x := h.access(ctx, r)
	if !x.txnID(kafkaacl.OpWrite, req.TransactionalID) {
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil
	}
	if !x.group(kafkaacl.OpRead, req.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp, nil
	}
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.txns.AddOffsetsToTxn(cctx, &coordinatorv1.AddOffsetsToTxnRequest{TransactionalId: req.TransactionalID,
		ProducerId: req.ProducerID, ProducerEpoch: int32(req.ProducerEpoch), GroupId: req.Group})
	if err != nil {
		resp.ErrorCode = h.txnCode("AddOffsetsToTxn", err)
		return resp, nil
	}
	resp.ErrorCode = fenced(out.GetErrorCode(), req.Version, 2)
	return resp, nil
}
