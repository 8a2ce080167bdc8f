package handler

// TxnOffsetCommit (API key 28), versions 0-5.
//
// Behaviour: the group's offsets are staged in the producer's transaction by the
// coordinator's transaction coordinator (Postgres); they become the group's committed
// offsets when the transaction commits and are dropped when it aborts. Until then an
// OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them. Partitions
// of unknown topics are UNKNOWN_TOPIC_OR_PARTITION (not sent); the others get the
// coordinator's codes: INVALID_GROUP_ID, INVALID_PRODUCER_ID_MAPPING,
// INVALID_PRODUCER_EPOCH (another epoch), INVALID_TXN_STATE (no Ongoing transaction, or
// the group not added with AddOffsetsToTxn), CONCURRENT_TRANSACTIONS (retriable),
// UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / FENCED_INSTANCE_ID (v3+ group metadata
// that does not match the group), OFFSET_METADATA_TOO_LARGE. Coordinator outage:
// COORDINATOR_NOT_AVAILABLE. v5 (KIP-890 transactions v2) adds the group to the
// transaction itself (no AddOffsetsToTxn), opening one if none is. v6 (topic ids) is
// not served.
//
// KIPs: KIP-98, KIP-320 (leader epoch v2+), KIP-447 (group metadata v3+), KIP-482
// (flexible v3+), KIP-890 (v5).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.TxnOffsetCommit.Int16(), 0, 5, (*Handler).handleTxnOffsetCommit) }

func (h *Handler) handleTxnOffsetCommit(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.TxnOffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
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
	names := make([]string, 0, len(req.Topics))
	for _, t := range req.Topics {
		names = append(names, t.Topic)
	}
	topics, err := h.getTopics(ctx, names, false)
	if err != nil {
		setAll(h.txnCode("TxnOffsetCommit", err))
		return resp, nil
	}
	creq := &coordinatorv1.TxnOffsetCommitRequest{TransactionalId: req.TransactionalID, GroupId: req.Group,
		ProducerId: req.ProducerID, ProducerEpoch: int32(req.ProducerEpoch), GenerationId: -1, AddGroup: req.Version >= 5}
	if req.Version >= 3 {
		creq.GenerationId, creq.MemberId, creq.GroupInstanceId = req.Generation, req.MemberID, req.InstanceID
	}
	// at[k] is the response slot of the k-th partition sent.
	type slot struct{ t, p int }
	var at []slot
	for i, t := range req.Topics {
		ct := &coordinatorv1.OffsetCommitTopic{Name: t.Topic}
		ti := topics[t.Topic]
		for j, p := range t.Partitions {
			if ti == nil || p.Partition < 0 || p.Partition >= ti.Partitions {
				resp.Topics[i].Partitions[j].ErrorCode = kerr.UnknownTopicOrPartition.Code
				continue
			}
			epoch := p.LeaderEpoch
			if req.Version < 2 {
				epoch = -1
			}
			ct.Partitions = append(ct.Partitions, &coordinatorv1.OffsetCommitPartition{
				Partition: p.Partition, CommittedOffset: p.Offset, CommittedLeaderEpoch: epoch, Metadata: p.Metadata,
			})
			at = append(at, slot{i, j})
		}
		if len(ct.Partitions) > 0 {
			creq.Topics = append(creq.Topics, ct)
		}
	}
	if len(at) == 0 {
		return resp, nil
	}
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.txns.TxnOffsetCommit(cctx, creq)
	var codes []int16
	failed := kerr.CoordinatorNotAvailable.Code
	if err != nil {
		failed = h.txnCode("TxnOffsetCommit", err)
	} else {
		for _, t := range out.GetTopics() {
			for _, p := range t.GetPartitions() {
				codes = append(codes, int16(p.GetErrorCode()))
			}
		}
	}
	for k, s := range at {
		code := failed
		if k < len(codes) {
			code = codes[k]
		}
		resp.Topics[s.t].Partitions[s.p].ErrorCode = code
	}
	return resp, nil
}
