package handler

// AlterShareGroupOffsets (API key 91), version 0 (KIP-932).
//
// Behaviour: sets the share-partition start offsets of an empty share group through
// the coordinator, which holds the group row lock (no member joins meanwhile) and sets
// them in storage-core's share partitions (their in-flight state is dropped; an offset
// past the high watermark is the high watermark, below the log start the log start).
// A missing group is created, as Kafka does. A group with members is NON_EMPTY_GROUP,
// a group of another type GROUP_ID_NOT_FOUND, an empty id INVALID_GROUP_ID; a missing
// topic or partition UNKNOWN_TOPIC_OR_PARTITION, a negative offset INVALID_REQUEST.
// Coordinator or storage outage: COORDINATOR_NOT_AVAILABLE. Not served when
// group.share.enable is off.
//
// With the authorizer on: READ on the group (as Kafka), else
// GROUP_AUTHORIZATION_FAILED, and READ on each topic, else TOPIC_AUTHORIZATION_FAILED
// on its partitions.
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
	register(kmsg.AlterShareGroupOffsets.Int16(), 0, 0, (*Handler).handleAlterShareGroupOffsets)
}

func (h *Handler) handleAlterShareGroupOffsets(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.AlterShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.AlterShareGroupOffsetsResponse)
	x := h.access(ctx, r)
	if code := x.groupCall(kafkaacl.OpRead, req.GroupID, nil, h.shares != nil); code != 0 {
		resp.ErrorCode = code
		return resp, nil
	}
	creq := &coordinatorv1.AlterShareGroupOffsetsRequest{GroupId: req.GroupID}
	var denied []kmsg.AlterShareGroupOffsetsResponseTopic
	for _, t := range req.Topics {
		if !x.topic(kafkaacl.OpRead, t.Topic) {
			dt := kmsg.NewAlterShareGroupOffsetsResponseTopic()
			dt.Topic = t.Topic
			for _, p := range t.Partitions {
				dp := kmsg.NewAlterShareGroupOffsetsResponseTopicPartition()
				dp.Partition, dp.ErrorCode = p.Partition, kerr.TopicAuthorizationFailed.Code
				dt.Partitions = append(dt.Partitions, dp)
			}
			denied = append(denied, dt)
			continue
		}
		ct := &coordinatorv1.ShareOffsetsAlterTopic{Name: t.Topic}
		for _, p := range t.Partitions {
			ct.Partitions = append(ct.Partitions, &coordinatorv1.ShareOffsetsAlterPartition{Partition: p.Partition, StartOffset: p.StartOffset})
		}
		creq.Topics = append(creq.Topics, ct)
	}
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	out, err := h.shares.AlterShareGroupOffsets(cctx, creq)
	if err != nil {
		resp.ErrorCode = h.groupCode("AlterShareGroupOffsets", err)
		return resp, nil
	}
	resp.ErrorCode, resp.ErrorMessage = int16(out.GetErrorCode()), strPtr(out.GetErrorMessage())
	if resp.ErrorCode != 0 {
		return resp, nil
	}
	for _, t := range out.GetTopics() {
		rt := kmsg.NewAlterShareGroupOffsetsResponseTopic()
		rt.Topic = t.GetName()
		copy(rt.TopicID[:], t.GetTopicId())
		for _, p := range t.GetPartitions() {
			rp := kmsg.NewAlterShareGroupOffsetsResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.ErrorMessage = p.GetPartition(), int16(p.GetErrorCode()), strPtr(p.GetErrorMessage())
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	resp.Topics = append(resp.Topics, denied...)
	return resp, nil
}
