package handler

// EndTxn (API key 26), versions 0-5.
//
// Behaviour: passed to the coordinator's transaction coordinator, which stores the
// decision (PrepareCommit / PrepareAbort) in Postgres, writes a COMMIT or ABORT marker
// into every partition of the transaction through storage-core and makes the staged
// offsets the group's committed offsets (commit) or drops them (abort); as Kafka, it
// answers once the decision is durable, the markers following (see the coordinator's
// README).
// A retry of the decision already taken is NONE; the other decision, or EndTxn
// without a transaction, is INVALID_TXN_STATE; INVALID_PRODUCER_ID_MAPPING,
// PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2, KIP-588), CONCURRENT_TRANSACTIONS
// (markers still being written: retriable). Coordinator outage:
// COORDINATOR_NOT_AVAILABLE. v5 (KIP-890 transactions v2) bumps the producer epoch at
// every end: the markers carry the bumped epoch, the answer returns it (producer id
// and epoch), and a retry with the epoch before the bump is answered as the original;
// at an exhausted epoch (32766 and up) the answer is a new producer id at epoch 0 (the
// markers still carry the old producer id).
//
// With the authorizer on: WRITE on the transactional id, else
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
//
// KIPs: KIP-98, KIP-482 (flexible v3+), KIP-588, KIP-890 (v4 TRANSACTION_ABORTABLE:
// not answered; v5 epoch bump).

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.EndTxn.Int16(), 0, 5, (*Handler).handleEndTxn) }

// endTxnTimeout bounds EndTxn: the coordinator writes every partition's marker first.
const endTxnTimeout = 40 * time.Second

func (h *Handler) handleEndTxn(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.EndTxnRequest)
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if !h.access(ctx, r).txnID(kafkaacl.OpWrite, req.TransactionalID) {
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil
	}
	cctx, cancel := context.WithTimeout(ctx, endTxnTimeout)
	defer cancel()
	out, err := h.txns.EndTxn(cctx, &coordinatorv1.EndTxnRequest{TransactionalId: req.TransactionalID,
		ProducerId: req.ProducerID, ProducerEpoch: int32(req.ProducerEpoch), Commit: req.Commit, BumpEpoch: req.Version >= 5})
	if err != nil {
		resp.ErrorCode = h.txnCode("EndTxn", err)
		return resp, nil
	}
	resp.ErrorCode = fenced(out.GetErrorCode(), req.Version, 2)
	if resp.ErrorCode == 0 {
		resp.ProducerID, resp.ProducerEpoch = out.GetProducerId(), int16(out.GetProducerEpoch())
	}
	return resp, nil
}
