package handler

// OffsetCommit (API key 8), versions 2-9 (KIP-896: v0-1 are gone from Kafka 4.0; v10
// addresses topics by id and is not served).
//
// Behaviour: partitions of unknown topics (or beyond the partition count) are
// UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers; the rest go to the coordinator, which
// checks the member and generation (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
// FENCED_INSTANCE_ID v7+, REBALANCE_IN_PROGRESS) and writes the offsets to Postgres
// before answering. Generation -1 with no member id is a commit by a client that does
// not use group management. Metadata above 4096 bytes is OFFSET_METADATA_TOO_LARGE.
// The v2-4 retention time is ignored (offsets.retention.minutes applies, KIP-211).
// Coordinator outage: COORDINATOR_NOT_AVAILABLE for every partition. With the
// authorizer on: READ on the group (else GROUP_AUTHORIZATION_FAILED for every
// partition), then READ on each topic (else TOPIC_AUTHORIZATION_FAILED).
//
// KIPs: KIP-211 (v5), KIP-320 (leader epoch v6), KIP-345 (v7), KIP-482 (flexible v8+),
// KIP-848 (v9: for a consumer group the generation is the member epoch, checked as
// Kafka 4 does: UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, STALE_MEMBER_EPOCH; a commit
// at the member's previous epoch of partitions it still owns is accepted), KIP-896.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.OffsetCommit.Int16(), 2, 9, (*Handler).handleOffsetCommit) }

func (h *Handler) handleOffsetCommit(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.OffsetCommitRequest)
	in := make([]commitTopic, len(req.Topics))
	for i, t := range req.Topics {
		in[i].name = t.Topic
		for _, p := range t.Partitions {
			epoch := p.LeaderEpoch
			if req.Version < 6 {
				epoch = -1
			}
			in[i].parts = append(in[i].parts, &coordinatorv1.OffsetCommitPartition{
				Partition: p.Partition, CommittedOffset: p.Offset, CommittedLeaderEpoch: epoch, Metadata: p.Metadata,
			})
		}
	}
	pl := newCommitPlan(in)
	h.offsetCommit(ctx, h.access(ctx, r), req, pl)
	// The response mirrors the request, in order.
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	for i, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, pl.codes[i][j]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// offsetCommit checks the partitions of pl, commits the ones that pass through the
// coordinator and sets every partition's code in pl.
func (h *Handler) offsetCommit(ctx context.Context, x *access, req *kmsg.OffsetCommitRequest, pl *commitPlan) {
	if !x.group(kafkaacl.OpRead, req.Group) {
		pl.setAll(kerr.GroupAuthorizationFailed.Code)
		return
	}
	if req.Group == "" {
		pl.setAll(kerr.InvalidGroupID.Code)
		return
	}
	if err := h.checkCommit(ctx, x, pl); err != nil {
		pl.setAll(h.groupCode("OffsetCommit", err))
		return
	}
	if len(pl.sent) == 0 {
		return
	}
	creq := &coordinatorv1.OffsetCommitRequest{GroupId: req.Group, GenerationId: req.Generation, MemberId: req.MemberID,
		GroupInstanceId: req.InstanceID, Topics: pl.topics}
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	out, err := h.groups.OffsetCommit(cctx, creq)
	if err != nil {
		pl.setSent(h.groupCode("OffsetCommit", err))
		return
	}
	type tp struct {
		topic     string
		partition int32
	}
	codes := map[tp]int16{}
	for _, t := range out.GetTopics() {
		for _, p := range t.GetPartitions() {
			codes[tp{t.GetName(), p.GetPartition()}] = int16(p.GetErrorCode())
		}
	}
	for _, s := range pl.sent {
		pl.codes[s.t][s.p] = codes[tp{pl.in[s.t].name, pl.in[s.t].parts[s.p].Partition}]
	}
}
