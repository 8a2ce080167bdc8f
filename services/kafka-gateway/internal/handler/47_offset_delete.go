package handler

// OffsetDelete (API key 47), version 0.
//
// Behaviour: the coordinator deletes committed offsets of the named partitions, except
// those of topics an active consumer group is subscribed to (GROUP_SUBSCRIBED_TO_TOPIC,
// per partition). Unknown group: GROUP_ID_NOT_FOUND; empty id: INVALID_GROUP_ID; an
// active group of another protocol type: NON_EMPTY_GROUP. Coordinator outage:
// COORDINATOR_NOT_AVAILABLE.
//
// With the authorizer on: DELETE on the group (else a top-level
// GROUP_AUTHORIZATION_FAILED), READ on each topic (else TOPIC_AUTHORIZATION_FAILED for
// its partitions, listed after the others).
//
// KIPs: KIP-496.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.OffsetDelete.Int16(), 0, 0, (*Handler).handleOffsetDelete) }

func (h *Handler) handleOffsetDelete(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.OffsetDeleteRequest)
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	x := h.access(ctx, r)
	if !x.group(kafkaacl.OpDelete, req.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp, nil
	}
	creq := &coordinatorv1.OffsetDeleteRequest{GroupId: req.Group}
	var denied []kmsg.OffsetDeleteResponseTopic
	for _, t := range req.Topics {
		if !x.topic(kafkaacl.OpRead, t.Topic) {
			rt := kmsg.NewOffsetDeleteResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetDeleteResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.TopicAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			denied = append(denied, rt)
			continue
		}
		ct := &coordinatorv1.OffsetDeleteTopic{Name: t.Topic}
		for _, p := range t.Partitions {
			ct.Partitions = append(ct.Partitions, p.Partition)
		}
		creq.Topics = append(creq.Topics, ct)
	}
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	out, err := h.groups.OffsetDelete(cctx, creq)
	if err != nil {
		resp.ErrorCode = h.groupCode("OffsetDelete", err)
		return resp, nil
	}
	resp.ErrorCode = int16(out.GetErrorCode())
	if resp.ErrorCode != 0 {
		return resp, nil
	}
	for _, t := range out.GetTopics() {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.GetName()
		for _, p := range t.GetPartitions() {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.GetPartition(), int16(p.GetErrorCode())
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	resp.Topics = append(resp.Topics, denied...)
	return resp, nil
}
