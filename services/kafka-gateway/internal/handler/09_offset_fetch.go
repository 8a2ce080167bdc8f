package handler

// OffsetFetch (API key 9), versions 1-9 (KIP-896: v0 is gone from Kafka 4.0; v10
// addresses topics by id and is not served).
//
// Behaviour: committed offsets from the coordinator (Postgres). v2+ may ask for every
// committed partition (null topics); v8+ asks for many groups at once (KIP-709), each
// answered on its own. A partition without a commit is offset -1, leader epoch -1, empty
// metadata; an unknown group is not an error. v0-1 have no top-level error code, so a
// group-level error is put on each partition. Coordinator outage:
// COORDINATOR_NOT_AVAILABLE. With the authorizer on (Kafka's handleOffsetFetchRequest):
// a group without DESCRIBE is GROUP_AUTHORIZATION_FAILED with no offsets (v0-1: on each
// partition asked); a named topic without DESCRIBE has its partitions
// TOPIC_AUTHORIZATION_FAILED (offset -1), and the all-topics form leaves such topics out.
//
// KIPs: KIP-88 (all topics v2), KIP-320 (leader epoch v5), KIP-447 (require stable v7),
// KIP-482 (flexible v6+), KIP-709 (groups v8), KIP-848 (member id/epoch v9: checked
// for consumer groups, UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH for the group).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.OffsetFetch.Int16(), 1, 9, (*Handler).handleOffsetFetch) }

func (h *Handler) handleOffsetFetch(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.OffsetFetchRequest)
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	creq := &coordinatorv1.OffsetFetchRequest{RequireStable: req.RequireStable}
	if req.Version < 8 {
		g := &coordinatorv1.OffsetFetchGroup{GroupId: req.Group, AllTopics: req.Topics == nil && req.Version >= 2}
		for _, t := range req.Topics {
			g.Topics = append(g.Topics, &coordinatorv1.OffsetFetchTopic{Name: t.Topic, Partitions: t.Partitions})
		}
		creq.Groups = append(creq.Groups, g)
	}
	for _, rg := range req.Groups {
		g := &coordinatorv1.OffsetFetchGroup{GroupId: rg.Group, AllTopics: rg.Topics == nil}
		if req.Version >= 9 {
			g.MemberId, g.MemberEpoch = rg.MemberID, rg.MemberEpoch
		}
		for _, t := range rg.Topics {
			g.Topics = append(g.Topics, &coordinatorv1.OffsetFetchTopic{Name: t.Topic, Partitions: t.Partitions})
		}
		creq.Groups = append(creq.Groups, g)
	}
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	out, err := h.groups.OffsetFetch(cctx, creq)
	if err != nil {
		code := h.groupCode("OffsetFetch", err)
		out = &coordinatorv1.OffsetFetchResponse{}
		for _, g := range creq.Groups {
			fg := &coordinatorv1.FetchedGroup{GroupId: g.GetGroupId(), ErrorCode: int32(code)}
			for _, t := range g.GetTopics() {
				ft := &coordinatorv1.FetchedTopic{Name: t.GetName()}
				for _, p := range t.GetPartitions() {
					ft.Partitions = append(ft.Partitions, &coordinatorv1.FetchedPartition{Partition: p, CommittedOffset: -1, CommittedLeaderEpoch: -1})
				}
				fg.Topics = append(fg.Topics, ft)
			}
			out.Groups = append(out.Groups, fg)
		}
	}
	if x := h.access(ctx, r); x != nil {
		authorizeOffsetFetch(x, req.Version, creq, out)
	}
	if req.Version < 8 {
		var fg *coordinatorv1.FetchedGroup
		if len(out.GetGroups()) > 0 {
			fg = out.GetGroups()[0]
		}
		resp.ErrorCode = int16(fg.GetErrorCode())
		for _, t := range fg.GetTopics() {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.GetName()
			for _, p := range t.GetPartitions() {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch = p.GetPartition(), p.GetCommittedOffset(), p.GetCommittedLeaderEpoch()
				md := p.GetMetadata()
				rp.Metadata = &md
				rp.ErrorCode = int16(p.GetErrorCode())
				if req.Version < 2 && rp.ErrorCode == 0 {
					rp.ErrorCode = resp.ErrorCode
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil
	}
	for _, g := range out.GetGroups() {
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group, rg.ErrorCode = g.GetGroupId(), int16(g.GetErrorCode())
		for _, t := range g.GetTopics() {
			rt := kmsg.NewOffsetFetchResponseGroupTopic()
			rt.Topic = t.GetName()
			for _, p := range t.GetPartitions() {
				rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch = p.GetPartition(), p.GetCommittedOffset(), p.GetCommittedLeaderEpoch()
				md := p.GetMetadata()
				rp.Metadata = &md
				rp.ErrorCode = int16(p.GetErrorCode())
				rt.Partitions = append(rt.Partitions, rp)
			}
			rg.Topics = append(rg.Topics, rt)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

// authorizeOffsetFetch rewrites the coordinator's answer out to what the principal may
// see: groups it may not DESCRIBE lose their offsets, topics it may not DESCRIBE are
// refused (named) or left out (all topics).
func authorizeOffsetFetch(x *access, version int16, creq *coordinatorv1.OffsetFetchRequest, out *coordinatorv1.OffsetFetchResponse) {
	for i, g := range out.GetGroups() {
		if !x.group(kafkaacl.OpDescribe, g.GetGroupId()) {
			fg := &coordinatorv1.FetchedGroup{GroupId: g.GetGroupId(), ErrorCode: int32(kerr.GroupAuthorizationFailed.Code)}
			if version < 2 && i < len(creq.GetGroups()) {
				for _, t := range creq.GetGroups()[i].GetTopics() {
					ft := &coordinatorv1.FetchedTopic{Name: t.GetName()}
					for _, p := range t.GetPartitions() {
						ft.Partitions = append(ft.Partitions, &coordinatorv1.FetchedPartition{Partition: p, CommittedOffset: -1,
							CommittedLeaderEpoch: -1, ErrorCode: int32(kerr.GroupAuthorizationFailed.Code)})
					}
					fg.Topics = append(fg.Topics, ft)
				}
			}
			out.Groups[i] = fg
			continue
		}
		all := i < len(creq.GetGroups()) && creq.GetGroups()[i].GetAllTopics()
		topics := g.Topics[:0]
		for _, t := range g.GetTopics() {
			if !x.topic(kafkaacl.OpDescribe, t.GetName()) {
				if all {
					continue
				}
				for _, p := range t.GetPartitions() {
					p.CommittedOffset, p.CommittedLeaderEpoch, p.Metadata = -1, -1, ""
					p.ErrorCode = int32(kerr.TopicAuthorizationFailed.Code)
				}
			}
			topics = append(topics, t)
		}
		g.Topics = topics
	}
}
