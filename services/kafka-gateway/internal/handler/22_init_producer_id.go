package handler

// InitProducerId (API key 22), versions 0-5.
//
// Behaviour: passed through to the coordinator, which hands out producer ids from blocks
// kept in Postgres, epoch 0. Idempotent producers (null transactional id) get a fresh
// id. A transactional id (any non-empty string; an empty one is INVALID_REQUEST) is
// served by the transaction coordinator: a new id gets a fresh producer id, a known
// one its epoch bumped, fencing the previous producer (an open transaction is aborted
// first and CONCURRENT_TRANSACTIONS answered, so the client retries);
// transaction_timeout_ms must be 1..transaction.max.timeout.ms (15 min), else
// INVALID_TRANSACTION_TIMEOUT; an id over 1024 bytes (the coordinator's Postgres key
// limit) is UNKNOWN_SERVER_ERROR, as Kafka answers an id whose state record is too
// large, so the client fails instead of retrying forever. v3+ may carry an existing producer id and epoch
// (KIP-360 epoch bump; PRODUCER_FENCED when they are not the current ones, answered as
// INVALID_PRODUCER_EPOCH before v4, KIP-588). Coordinator outage:
// COORDINATOR_NOT_AVAILABLE, which every client retries. With the authorizer on: WRITE
// on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without one,
// IDEMPOTENT_WRITE on the cluster or WRITE on at least one topic (KIP-679), else
// CLUSTER_AUTHORIZATION_FAILED.
//
// KIPs: KIP-98, KIP-360 (v3), KIP-482 (flexible v2+), KIP-588 (v4), KIP-890 (v5).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/kafkaacl"
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
		if *req.TransactionalID == "" {
			resp.ErrorCode = kerr.InvalidRequest.Code
			return resp, nil
		}
		creq.TransactionalId = *req.TransactionalID
	}
	// Kafka's handleInitProducerIdRequest: WRITE on the transactional id, or for an
	// idempotent producer IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
	x := h.access(ctx, r)
	if req.TransactionalID != nil && !x.txnID(kafkaacl.OpWrite, *req.TransactionalID) {
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil
	}
	if req.TransactionalID == nil && !x.cluster(kafkaacl.OpIdempotentWrite) && !x.anyOf(kafkaacl.OpWrite, kafkaacl.ResourceTopic) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil
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
	resp.ErrorCode = fenced(out.GetErrorCode(), req.Version, 4)
	if resp.ErrorCode == 0 {
		resp.ProducerID, resp.ProducerEpoch = out.GetProducerId(), int16(out.GetProducerEpoch())
	}
	return resp, nil
}
