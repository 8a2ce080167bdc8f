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
// Coordinator outage: COORDINATOR_NOT_AVAILABLE for every partition.
//
// KIPs: KIP-211 (v5), KIP-320 (leader epoch v6), KIP-345 (v7), KIP-482 (flexible v8+),
// KIP-447 (v9 member epoch is for KIP-848 groups: ignored), KIP-896.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.OffsetCommit.Int16(), 2, 9, (*Handler).handleOffsetCommit) }

func (h *Handler) handleOffsetCommit(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.OffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	// The response mirrors the request, in order; codes are filled below.
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	setAll := func(code int16) {
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				resp.Topics[i].Partitions[j].ErrorCode = code
			}
		}
	}
	if req.Group == "" {
		setAll(kerr.InvalidGroupID.Code)
		return resp, nil
	}
	names := make([]string, 0, len(req.Topics))
	for _, t := range req.Topics {
		names = append(names, t.Topic)
	}
	topics, err := h.getTopics(ctx, names, false)
	if err != nil {
		setAll(h.groupCode("OffsetCommit", err))
		return resp, nil
	}
	creq := &coordinatorv1.OffsetCommitRequest{GroupId: req.Group, GenerationId: req.Generation, MemberId: req.MemberID, GroupInstanceId: req.InstanceID}
	type tp struct {
		topic     string
		partition int32
	}
	sent := map[tp]bool{}
	for i, t := range req.Topics {
		ct := &coordinatorv1.OffsetCommitTopic{Name: t.Topic}
		ti := topics[t.Topic]
		for j, p := range t.Partitions {
			if ti == nil || p.Partition < 0 || p.Partition >= ti.Partitions {
				resp.Topics[i].Partitions[j].ErrorCode = kerr.UnknownTopicOrPartition.Code
				continue
			}
			epoch := p.LeaderEpoch
			if req.Version < 6 {
				epoch = -1
			}
			ct.Partitions = append(ct.Partitions, &coordinatorv1.OffsetCommitPartition{
				Partition: p.Partition, CommittedOffset: p.Offset, CommittedLeaderEpoch: epoch, Metadata: p.Metadata,
			})
			sent[tp{t.Topic, p.Partition}] = true
		}
		if len(ct.Partitions) > 0 {
			creq.Topics = append(creq.Topics, ct)
		}
	}
	if len(sent) == 0 {
		return resp, nil
	}
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	out, err := h.groups.OffsetCommit(cctx, creq)
	if err != nil {
		code := h.groupCode("OffsetCommit", err)
		for i, t := range req.Topics {
			for j, p := range t.Partitions {
				if sent[tp{t.Topic, p.Partition}] {
					resp.Topics[i].Partitions[j].ErrorCode = code
				}
			}
		}
		return resp, nil
	}
	codes := map[tp]int16{}
	for _, t := range out.GetTopics() {
		for _, p := range t.GetPartitions() {
			codes[tp{t.GetName(), p.GetPartition()}] = int16(p.GetErrorCode())
		}
	}
	for i, t := range req.Topics {
		for j, p := range t.Partitions {
			if k := (tp{t.Topic, p.Partition}); sent[k] {
				resp.Topics[i].Partitions[j].ErrorCode = codes[k]
			}
		}
	}
	return resp, nil
}
