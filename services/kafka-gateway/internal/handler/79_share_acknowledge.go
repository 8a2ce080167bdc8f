package handler

// ShareAcknowledge (API key 79), versions 1-2 (Kafka 4.2's range).
//
// Behaviour: acknowledges records acquired through ShareFetch on the connection's
// share session for (group, member): epoch 0 is INVALID_SHARE_SESSION_EPOCH (only a
// ShareFetch opens a session), a missing session SHARE_SESSION_NOT_FOUND, an epoch
// other than the session's INVALID_SHARE_SESSION_EPOCH; an accepted request moves the
// epoch. Epoch -1 applies the acknowledgements and closes the session, releasing what
// it still holds. Per partition the acknowledgements apply all or none: ErrorCode
// INVALID_RECORD_STATE when an offset is not acquired by the member (lock expired,
// another member's, never acquired, already acknowledged), INVALID_REQUEST for
// malformed batches (offsets out of order, type count, unknown type), UNKNOWN_TOPIC_ID
// for a topic id no topic has (a deleted topic's included) and
// UNKNOWN_TOPIC_OR_PARTITION for a partition outside the topic or one the group holds
// no share state for (never fetched, or deleted by DeleteShareGroupOffsets), as
// Kafka's SharePartitionManager answers an acknowledgement without a share partition. Types: 0 gap, 1 accept, 2
// release (redelivered at once, delivery count kept), 3 reject (never redelivered), 4
// renew (v2 with IsRenewAck only: the lock runs again). The member id must be 1..36
// bytes (INVALID_REQUEST).
//
// With the authorizer on: READ on the group and on each topic.
//
// KIPs: KIP-932, KIP-1222 (renew).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func init() {
	register(kmsg.ShareAcknowledge.Int16(), 1, 2, (*Handler).handleShareAcknowledge)
}

func (h *Handler) handleShareAcknowledge(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.ShareAcknowledgeRequest)
	resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
	resp.AcquisitionLockTimeoutMillis = h.cfg.Share.lockMs()
	group, member := derefString(req.GroupID), derefString(req.MemberID)
	x := h.access(ctx, r)
	renew := req.Version >= 2 && req.IsRenewAck
	shares := r.Session.shares()
	switch {
	case h.share == nil:
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp, nil
	case shares == nil:
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil
	case group == "" || member == "" || len(member) > maxShareMemberIDLen:
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	case !x.group(kafkaacl.OpRead, group):
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp, nil
	}
	key := shareKey{group, member}
	chk := shares.advance(key, req.ShareSessionEpoch, nil, nil, true, groupShareConfig{})
	if chk.code != 0 {
		resp.ErrorCode = chk.code
		return resp, nil
	}
	lockMs := chk.cfg.lockMs
	resp.AcquisitionLockTimeoutMillis = lockMs

	type entry struct {
		ti, pi int
	}
	var parts []sharePart
	var where []entry
	for ti, t := range req.Topics {
		rt := kmsg.NewShareAcknowledgeResponseTopic()
		rt.TopicID = t.TopicID
		for pi, p := range t.Partitions {
			rp := kmsg.NewShareAcknowledgeResponseTopicPartition()
			rp.Partition = p.Partition
			rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
			rt.Partitions = append(rt.Partitions, rp)
			parts = append(parts, sharePart{t.TopicID, p.Partition})
			where = append(where, entry{ti, pi})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	refs, codes := h.shareRefs(ctx, parts)
	var acks []*storagev1.SharePartitionAcks
	var at []int
	for i, e := range where {
		rp := &resp.Topics[e.ti].Partitions[e.pi]
		p := req.Topics[e.ti].Partitions[e.pi]
		first, last, types := make([]int64, len(p.AcknowledgementBatches)), make([]int64, len(p.AcknowledgementBatches)), make([][]int8, len(p.AcknowledgementBatches))
		for j, b := range p.AcknowledgementBatches {
			first[j], last[j], types[j] = b.FirstOffset, b.LastOffset, b.AcknowledgeTypes
		}
		bs, ok := shareAckBatches(first, last, types, renew)
		switch {
		case codes[i] != 0:
			rp.ErrorCode = codes[i]
		case !x.topic(kafkaacl.OpRead, refs[i].Topic):
			rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
		case !ok:
			rp.ErrorCode = kerr.InvalidRequest.Code
		case len(bs) > 0:
			acks = append(acks, &storagev1.SharePartitionAcks{Topic: refs[i].Topic, Partition: refs[i].Partition, Batches: bs})
			at = append(at, i)
		}
	}
	if len(acks) > 0 {
		cctx, cancel := context.WithTimeout(ctx, shareCallTimeout)
		ar, err := h.share.ShareAcknowledge(cctx, &storagev1.ShareAcknowledgeRequest{GroupId: group, MemberId: member, Acknowledgements: acks, LockDurationMs: lockMs})
		cancel()
		for k, i := range at {
			rp := &resp.Topics[where[i].ti].Partitions[where[i].pi]
			switch {
			case err != nil:
				rp.ErrorCode = dataCode(err)
			case k < len(ar.GetResults()):
				rp.ErrorCode = shareError(ar.GetResults()[k].GetError())
			}
		}
	}
	if req.ShareSessionEpoch == -1 {
		h.releaseSession(ctx, key, chk.parts)
	}
	return resp, nil
}
