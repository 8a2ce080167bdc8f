package handler

// DescribeShareGroupOffsets (API key 90), versions 0-1 (KIP-932; v1 adds the lag,
// KIP-1226).
//
// Behaviour: per group, the share-partition start offset (the first offset not yet
// accepted, rejected or archived) and the lag (records from there to the high
// watermark not yet done) of each named partition, from the coordinator, which reads
// storage-core's share partitions. A partition without share state, of a missing topic
// or of a missing group is start offset -1, lag -1, no error (as Kafka); a null topic
// list describes every partition the group has state for. A group of another type is
// GROUP_ID_NOT_FOUND, an empty id INVALID_GROUP_ID. Leader epochs are -1. Coordinator
// or storage outage: COORDINATOR_NOT_AVAILABLE on the group. Not served when
// group.share.enable is off.
//
// With the authorizer on: DESCRIBE on the group, else GROUP_AUTHORIZATION_FAILED; a
// named topic the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED on its
// partitions; with a null topic list such topics are left out.
//
// KIPs: KIP-932, KIP-1226.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() {
	register(kmsg.DescribeShareGroupOffsets.Int16(), 0, 1, (*Handler).handleDescribeShareGroupOffsets)
}

func (h *Handler) handleDescribeShareGroupOffsets(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DescribeShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeShareGroupOffsetsResponse)
	x := h.access(ctx, r)
	denied := func(p int32) kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition {
		rp := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
		rp.Partition, rp.StartOffset, rp.Lag, rp.LeaderEpoch, rp.ErrorCode = p, -1, -1, -1, kerr.TopicAuthorizationFailed.Code
		return rp
	}
	for _, rg := range req.Groups {
		g := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
		g.GroupID = rg.GroupID
		if code := x.groupCall(kafkaacl.OpDescribe, rg.GroupID, nil, h.shares != nil); code != 0 {
			g.ErrorCode = code
			resp.Groups = append(resp.Groups, g)
			continue
		}
		creq := &coordinatorv1.DescribeShareGroupOffsetsRequest{GroupId: rg.GroupID, AllTopics: rg.Topics == nil}
		var deniedTopics []kmsg.DescribeShareGroupOffsetsResponseGroupTopic
		for _, t := range rg.Topics {
			if !x.topic(kafkaacl.OpDescribe, t.Topic) {
				dt := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
				dt.Topic = t.Topic
				for _, p := range t.Partitions {
					dt.Partitions = append(dt.Partitions, denied(p))
				}
				deniedTopics = append(deniedTopics, dt)
				continue
			}
			creq.Topics = append(creq.Topics, &coordinatorv1.ShareOffsetsTopic{Name: t.Topic, Partitions: t.Partitions})
		}
		out := &coordinatorv1.DescribeShareGroupOffsetsResponse{}
		if creq.AllTopics || len(creq.Topics) > 0 {
			cctx, cancel := groupCtx(ctx, groupCallTimeout)
			var err error
			out, err = h.shares.DescribeShareGroupOffsets(cctx, creq)
			cancel()
			if err != nil {
				g.ErrorCode = h.groupCode("DescribeShareGroupOffsets", err)
				resp.Groups = append(resp.Groups, g)
				continue
			}
		}
		g.ErrorCode, g.ErrorMessage = int16(out.GetErrorCode()), strPtr(out.GetErrorMessage())
		for _, t := range out.GetTopics() {
			if creq.AllTopics && !x.topic(kafkaacl.OpDescribe, t.GetName()) {
				continue
			}
			rt := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
			rt.Topic = t.GetName()
			copy(rt.TopicID[:], t.GetTopicId())
			for _, p := range t.GetPartitions() {
				rp := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
				rp.Partition, rp.StartOffset, rp.Lag, rp.LeaderEpoch = p.GetPartition(), p.GetStartOffset(), p.GetLag(), -1
				rp.ErrorCode, rp.ErrorMessage = int16(p.GetErrorCode()), strPtr(p.GetErrorMessage())
				rt.Partitions = append(rt.Partitions, rp)
			}
			g.Topics = append(g.Topics, rt)
		}
		g.Topics = append(g.Topics, deniedTopics...)
		resp.Groups = append(resp.Groups, g)
	}
	return resp, nil
}
