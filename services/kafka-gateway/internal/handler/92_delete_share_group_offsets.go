package handler

// DeleteShareGroupOffsets (API key 92), version 0 (KIP-932).
//
// Behaviour: removes the share state of every partition of each named topic of an
// empty share group through the coordinator (under the group row lock), so their next
// consumer starts from share.auto.offset.reset. A missing group, or one of another
// type, is GROUP_ID_NOT_FOUND, a group with members NON_EMPTY_GROUP, an empty id
// INVALID_GROUP_ID; a missing topic is UNKNOWN_TOPIC_OR_PARTITION on that topic.
// Coordinator or storage outage: COORDINATOR_NOT_AVAILABLE. Not served when
// group.share.enable is off.
//
// With the authorizer on: DELETE on the group, else GROUP_AUTHORIZATION_FAILED, and
// READ on each topic, else TOPIC_AUTHORIZATION_FAILED on it.
//
// KIPs: KIP-932.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() {
	register(kmsg.DeleteShareGroupOffsets.Int16(), 0, 0, (*Handler).handleDeleteShareGroupOffsets)
}

func (h *Handler) handleDeleteShareGroupOffsets(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DeleteShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteShareGroupOffsetsResponse)
	x := h.access(ctx, r)
	if code := x.groupCall(kafkaacl.OpDelete, req.GroupID, nil, h.shares != nil); code != 0 {
		resp.ErrorCode = code
		return resp, nil
	}
	creq := &coordinatorv1.DeleteShareGroupOffsetsRequest{GroupId: req.GroupID}
	var denied []kmsg.DeleteShareGroupOffsetsResponseTopic
	for _, t := range req.Topics {
		if !x.topic(kafkaacl.OpRead, t.Topic) {
			dt := kmsg.NewDeleteShareGroupOffsetsResponseTopic()
			dt.Topic, dt.ErrorCode = t.Topic, kerr.TopicAuthorizationFailed.Code
			denied = append(denied, dt)
			continue
		}
		creq.Topics = append(creq.Topics, t.Topic)
	}
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	out, err := h.shares.DeleteShareGroupOffsets(cctx, creq)
	if err != nil {
		resp.ErrorCode = h.groupCode("DeleteShareGroupOffsets", err)
		return resp, nil
	}
	resp.ErrorCode, resp.ErrorMessage = int16(out.GetErrorCode()), strPtr(out.GetErrorMessage())
	if resp.ErrorCode != 0 {
		return resp, nil
	}
	for _, t := range out.GetTopics() {
		rt := kmsg.NewDeleteShareGroupOffsetsResponseTopic()
		rt.Topic, rt.ErrorCode, rt.ErrorMessage = t.GetName(), int16(t.GetErrorCode()), strPtr(t.GetErrorMessage())
		copy(rt.TopicID[:], t.GetTopicId())
		resp.Topics = append(resp.Topics, rt)
	}
	resp.Topics = append(resp.Topics, denied...)
	return resp, nil
}
