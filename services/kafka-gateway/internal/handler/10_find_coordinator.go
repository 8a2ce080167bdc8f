package handler

// FindCoordinator (API key 10), versions 0-6.
//
// Behaviour: every kafka-gateway replica can serve every group and transactional id
// (their state lives in the coordinator service, in Postgres), so the answer is always
// this replica, as it is listed in Metadata. Key types: 0 group, 1 transaction; any
// other (2 share, KIP-932) is INVALID_REQUEST. v4+ batches keys (KIP-699); each key gets
// its own entry. Registered from v0 also because librdkafka enables LZ4 only when the
// broker advertises FindCoordinator v0 (its feature map ties LZ4 to Kafka 0.8.2).
// With the authorizer on: DESCRIBE on the group or transactional id, else
// GROUP_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED for that key.
//
// KIPs: KIP-98 (key type, v1), KIP-482 (flexible v3+), KIP-699 (batched v4+).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
)

func init() { register(kmsg.FindCoordinator.Int16(), 0, 6, (*Handler).handleFindCoordinator) }

// self returns this replica as listed to clients of listener.
func (h *Handler) self(listener string) Broker {
	for _, b := range h.liveBrokers(listener) {
		if b.NodeID == h.cfg.NodeID {
			return b
		}
	}
	return Broker{NodeID: h.cfg.NodeID, Host: "127.0.0.1", Port: 9092}
}

// findCode is the authorization outcome for one key: DESCRIBE on the group (key type
// 0) or the transactional id (1), else GROUP_AUTHORIZATION_FAILED /
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
func findCode(x *access, keyType int8, key string) int16 {
	switch {
	case keyType == 0 && !x.group(kafkaacl.OpDescribe, key):
		return kerr.GroupAuthorizationFailed.Code
	case keyType == 1 && !x.txnID(kafkaacl.OpDescribe, key):
		return kerr.TransactionalIDAuthorizationFailed.Code
	}
	return 0
}

func (h *Handler) handleFindCoordinator(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	me := h.self(r.Listener)
	x := h.access(ctx, r)
	code := int16(0)
	var msg *string
	if req.CoordinatorType != 0 && req.CoordinatorType != 1 {
		code = kerr.InvalidRequest.Code
		msg = strPtr("only group (0) and transaction (1) coordinators are served")
	}
	if req.Version < 4 {
		if code == 0 {
			code = findCode(x, req.CoordinatorType, req.CoordinatorKey)
		}
		resp.ErrorCode, resp.ErrorMessage = code, msg
		if code == 0 {
			resp.NodeID, resp.Host, resp.Port = me.NodeID, me.Host, me.Port
		} else {
			resp.NodeID = -1
		}
		return resp, nil
	}
	for _, key := range req.CoordinatorKeys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		kc := code
		if kc == 0 {
			kc = findCode(x, req.CoordinatorType, key)
		}
		c.Key, c.ErrorCode, c.ErrorMessage = key, kc, msg
		c.NodeID = -1
		if kc == 0 {
			c.NodeID, c.Host, c.Port = me.NodeID, me.Host, me.Port
		}
		resp.Coordinators = append(resp.Coordinators, c)
	}
	return resp, nil
}
