package handler

// InitProducerId (API key 22), versions 0-5.
//
// Behaviour: passed through to the coordinator, which hands out producer ids from blocks
// kept in Postgres, epoch 0. Idempotent producers (null transactional id) are served;
// a transactional id is passed through and the coordinator answers INVALID_REQUEST until
// transactions are implemented. v3+ may carry an existing producer id and epoch (KIP-360
// epoch bump). Coordinator outage: COORDINATOR_NOT_AVAILABLE, which every client retries.
//
// KIPs: KIP-98, KIP-360 (v3), KIP-482 (flexible v2+), KIP-890 (v5).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.InitProducerID.Int16(), 0, 5, (*Handler).handleInitProducerID) }

func (h *Handler) handleInitProducerID(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1

	creq := &coordinatorv1.InitProducerIdRequest{
		TransactionTimeoutMs: req.TransactionTimeoutMillis,
		ProducerId:           -1,
		ProducerEpoch:        -1,
	}
	if req.TransactionalID != nil {
		creq.TransactionalId = *req.TransactionalID
	}
	if req.Version >= 3 {
		creq.ProducerId, creq.ProducerEpoch = req.ProducerID, int32(req.ProducerEpoch)
	}
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.coord.InitProducerId(cctx, creq)
	if err != nil {
		h.log.Warn("coordinator InitProducerId failed", zap.Error(err))
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp, nil
	}
	resp.ErrorCode = int16(out.GetErrorCode())
	if resp.ErrorCode == 0 {
		resp.ProducerID, resp.ProducerEpoch = out.GetProducerId(), int16(out.GetProducerEpoch())
	}
	return resp, nil
}
