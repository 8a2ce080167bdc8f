package handler

// FindCoordinator (API key 10), versions 0-5.
//
// Consumer groups and transactions are not served yet, so every key (group or
// transactional id, v4+ batched keys too) is answered with COORDINATOR_NOT_AVAILABLE
// (15), which clients treat as retriable. The API is registered anyway, from v0:
// librdkafka enables LZ4 compression only when the broker advertises FindCoordinator v0
// (its feature map ties LZ4 to Kafka 0.8.2, which introduced this API), so without it
// kcat silently stops compressing with lz4.
//
// KIPs: KIP-98 (v1 key type), KIP-482 (flexible v3+), KIP-699 (batched keys, v4),
// KIP-890 (v5).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { register(kmsg.FindCoordinator.Int16(), 0, 5, (*Handler).handleFindCoordinator) }

func (h *Handler) handleFindCoordinator(_ context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	msg := "consumer groups and transactions are not served yet"
	if req.Version < 4 {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		resp.ErrorMessage = &msg
		resp.NodeID, resp.Port = -1, -1
		return resp, nil
	}
	for _, k := range req.CoordinatorKeys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key = k
		c.NodeID, c.Port = -1, -1
		c.ErrorCode = kerr.CoordinatorNotAvailable.Code
		c.ErrorMessage = &msg
		resp.Coordinators = append(resp.Coordinators, c)
	}
	return resp, nil
}
