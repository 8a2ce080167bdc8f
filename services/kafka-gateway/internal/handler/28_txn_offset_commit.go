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
// not served. With the authorizer on: WRITE on the transactional id (else
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (else
// GROUP_AUTHORIZATION_FAILED), both for every partition, then READ on each topic (else
// TOPIC_AUTHORIZATION_FAILED).
//
// KIPs: KIP-98, KIP-320 (leader epoch v2+), KIP-447 (group metadata v3+), KIP-482
// (flexible v3+), KIP-890 (v5).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.TxnOffsetCommit.Int16(), 0, 5, (*Handler).handleTxnOffsetCommit) }

func (h *Handler) handleTxnOffsetCommit(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.TxnOffsetCommitRequest)
	in := make([]commitTopic, len(req.Topics))
	for i, t := range req.Topics {
		in[i].name = t.Topic
		for _, p := range t.Partitions {
			epoch := p.LeaderEpoch
			if req.Version < 2 {
				epoch = -1
			}
			in[i].parts = append(in[i].parts, &coordinatorv1.OffsetCommitPartition{
				Partition: p.Partition, CommittedOffset: p.Offset, CommittedLeaderEpoch: epoch, Metadata: p.Metadata,
			})
		}
	}
	pl := newCommitPlan(in)
	h.txnOffsetCommit(ctx, h.access(ctx, r), req, pl)
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	for i, t := range req.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, pl.codes[i][j]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// txnOffsetCommit checks the partitions of pl, stages the ones that pass in the
// producer's transaction and sets every partition's code in pl.
func (h *Handler) txnOffsetCommit(ctx context.Context, x *access, req *kmsg.TxnOffsetCommitRequest, pl *commitPlan) {
	if !x.txnID(kafkaacl.OpWrite, req.TransactionalID) {
		pl.setAll(kerr.TransactionalIDAuthorizationFailed.Code)
		return
	}
	if !x.group(kafkaacl.OpRead, req.Group) {
		pl.setAll(kerr.GroupAuthorizationFailed.Code)
		return
	}
	if err := h.checkCommit(ctx, x, pl); err != nil {
		pl.setAll(h.txnCode("TxnOffsetCommit", err))
		return
	}
	if len(pl.sent) == 0 {
		return
	}
	creq := &coordinatorv1.TxnOffsetCommitRequest{TransactionalId: req.TransactionalID, GroupId: req.Group,
		ProducerId: req.ProducerID, ProducerEpoch: int32(req.ProducerEpoch), GenerationId: -1, AddGroup: req.Version >= 5,
		Topics: pl.topics}
	if req.Version >= 3 {
		creq.GenerationId, creq.MemberId, creq.GroupInstanceId = req.Generation, req.MemberID, req.InstanceID
	}
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.txns.TxnOffsetCommit(cctx, creq)
	if err != nil {
		pl.setSent(h.txnCode("TxnOffsetCommit", err))
		return
	}
	// The coordinator answers the sent partitions in the order sent; one it leaves out
	// is COORDINATOR_NOT_AVAILABLE.
	var codes []int16
	for _, t := range out.GetTopics() {
		for _, p := range t.GetPartitions() {
			codes = append(codes, int16(p.GetErrorCode()))
		}
	}
	for k, s := range pl.sent {
		code := kerr.CoordinatorNotAvailable.Code
		if k < len(codes) {
			code = codes[k]
		}
		pl.codes[s.t][s.p] = code
	}
}
