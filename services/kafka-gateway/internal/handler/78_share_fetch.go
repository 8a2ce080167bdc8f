package handler

// ShareFetch (API key 78), versions 1-2 (Kafka 4.2's range; v0 was Kafka 4.0's early
// access, removed in 4.1).
//
// Behaviour: the connection's share session for (group, member) is opened (epoch 0,
// no acknowledgements allowed: INVALID_REQUEST), moved (epoch n: it must be the
// session's, else INVALID_SHARE_SESSION_EPOCH; no session: SHARE_SESSION_NOT_FOUND;
// Topics add partitions, ForgottenTopicsData removes them) or closed (epoch -1: the
// acknowledgements are applied, the session's remaining acquisitions released, nothing
// fetched). Piggybacked acknowledgements apply first, per partition all or none
// (AcknowledgeErrorCode INVALID_RECORD_STATE when an offset is not acquired by the
// member); then up to MaxRecords records (0: 500) are acquired over the session's
// partitions for group.share.record.lock.duration.ms, waiting up to MaxWaitMillis
// while none is available. Each partition's records come as one uncompressed batch at
// their offsets with AcquiredRecords ranges (delivery counts), encoded by storage-core
// and passed on as it is (written by reference). A partition never
// fetched by the group starts at share.auto.offset.reset (latest by default). The
// group's share.auto.offset.reset, share.record.lock.duration.ms,
// share.delivery.count.limit and share.isolation.level (GROUP configs, read from the
// coordinator when the session opens; COORDINATOR_NOT_AVAILABLE when it cannot be
// asked) override the broker's group.share.* settings; a delivery count limit applies
// to partitions the group starts after it is set. At read_committed only records
// below the partition's last stable offset are acquired and aborted transactions'
// records never (archived, as Kafka's SharePartition does); control records are
// never delivered at either level (their offsets lie outside AcquiredRecords). The
// member id must be 1..36 bytes (INVALID_REQUEST), as Kafka checks. A request that
// would acquire (any epoch but -1, not a renew) from a member id the share group does
// not have (never joined, left, or no such share group) is UNKNOWN_MEMBER_ID before
// anything else is done, so that it starts no share state nothing would delete (Kafka
// refuses such partitions one by one, its share state being initialized only by the
// group coordinator's assignment; here state starts at the first fetch). Membership is
// cached (share_members.go); the coordinator unreachable for a member never seen is
// COORDINATOR_NOT_AVAILABLE. An unknown topic id is UNKNOWN_TOPIC_ID, a partition
// outside the topic UNKNOWN_TOPIC_OR_PARTITION. A piggybacked acknowledgement for a
// partition the group holds no share state for (deleted by DeleteShareGroupOffsets)
// is UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers. v2: IsRenewAck requests
// carry only acknowledgements (RENEW allowed) and zero fetch limits, else
// INVALID_REQUEST; ShareAcquireMode record_limit is what every acquisition does
// (never more than MaxRecords).
//
// With the authorizer on: READ on the group (GROUP_AUTHORIZATION_FAILED) and READ on
// each topic (TOPIC_AUTHORIZATION_FAILED for its partitions).
//
// KIPs: KIP-932 (share groups), KIP-1206 (acquire mode), KIP-1222 (renew).

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func init() {
	register(kmsg.ShareFetch.Int16(), 1, 2, (*Handler).handleShareFetch)
}

func (h *Handler) handleShareFetch(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.ShareFetchRequest)
	resp := req.ResponseKind().(*kmsg.ShareFetchResponse)
	resp.AcquisitionLockTimeoutMillis = h.cfg.Share.lockMs()
	group, member := derefString(req.GroupID), derefString(req.MemberID)
	x := h.access(ctx, r)
	renew := req.Version >= 2 && req.IsRenewAck
	switch {
	case h.share == nil:
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp, nil
	case group == "" || member == "" || len(member) > maxShareMemberIDLen:
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	case !x.group(kafkaacl.OpRead, group):
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp, nil
	case renew && (req.MaxBytes != 0 || req.MinBytes != 0 || req.MaxRecords != 0 || req.MaxWaitMillis != 0):
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}

	// The request's partitions and acknowledgements.
	var add []sharePart
	var ackParts []sharePart
	var ackBatches [][]*storagev1.ShareAckBatch
	badAck := map[sharePart]bool{}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			sp := sharePart{t.TopicID, p.Partition}
			add = append(add, sp)
			if len(p.AcknowledgementBatches) == 0 {
				if renew {
					resp.ErrorCode = kerr.InvalidRequest.Code
					return resp, nil
				}
				continue
			}
			first, last, types := make([]int64, len(p.AcknowledgementBatches)), make([]int64, len(p.AcknowledgementBatches)), make([][]int8, len(p.AcknowledgementBatches))
			for i, b := range p.AcknowledgementBatches {
				first[i], last[i], types[i] = b.FirstOffset, b.LastOffset, b.AcknowledgeTypes
			}
			bs, ok := shareAckBatches(first, last, types, renew)
			if !ok {
				badAck[sp] = true
			}
			ackParts = append(ackParts, sp)
			ackBatches = append(ackBatches, bs)
		}
	}
	if req.ShareSessionEpoch == 0 && len(ackParts) > 0 {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	var forget []sharePart
	for _, f := range req.ForgottenTopicsData {
		for _, p := range f.Partitions {
			forget = append(forget, sharePart{f.TopicID, p})
		}
	}
	key := shareKey{group, member}
	shares := r.Session.shares()
	if shares == nil {
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil
	}
	// Only a member of the share group acquires records (and so starts share state);
	// closing a session (acks and release) and renewing locks need not be one.
	if req.ShareSessionEpoch != -1 && !renew {
		if code, msg := h.shareMemberCheck(ctx, group, member); code != 0 {
			resp.ErrorCode = code
			if msg != "" {
				resp.ErrorMessage = &msg
			}
			return resp, nil
		}
	}
	var cfg groupShareConfig
	if req.ShareSessionEpoch == 0 {
		var err error
		if cfg, err = h.groupShareConfig(ctx, group); err != nil {
			resp.ErrorCode = h.groupCode("ShareFetch", err)
			return resp, nil
		}
	}
	chk := shares.advance(key, req.ShareSessionEpoch, add, forget, false, cfg)
	if chk.code != 0 {
		resp.ErrorCode = chk.code
		return resp, nil
	}
	lockMs := chk.cfg.lockMs
	resp.AcquisitionLockTimeoutMillis = lockMs

	out := newShareFetchOut(resp)
	// Acknowledgements: checked here, applied by storage-core before it acquires
	// (in the same ShareFetch call when there is something to fetch).
	var acks []*storagev1.SharePartitionAcks
	var ackAt []sharePart
	if len(ackParts) > 0 {
		refs, codes := h.shareRefs(ctx, ackParts)
		for i, sp := range ackParts {
			switch {
			case codes[i] != 0:
				out.part(sp).AcknowledgeErrorCode = codes[i]
			case !x.topic(kafkaacl.OpRead, refs[i].Topic):
				out.part(sp).AcknowledgeErrorCode = kerr.TopicAuthorizationFailed.Code
			case badAck[sp]:
				out.part(sp).AcknowledgeErrorCode = kerr.InvalidRequest.Code
			default:
				acks = append(acks, &storagev1.SharePartitionAcks{Topic: refs[i].Topic, Partition: refs[i].Partition, Batches: ackBatches[i]})
				ackAt = append(ackAt, sp)
			}
		}
	}
	ackResults := func(rs []*storagev1.ShareAckResult, err error) {
		for k, sp := range ackAt {
			p := out.part(sp)
			switch {
			case err != nil:
				p.AcknowledgeErrorCode = dataCode(err)
			case k < len(rs):
				p.AcknowledgeErrorCode = shareError(rs[k].GetError())
			}
		}
	}
	acknowledgeOnly := func() {
		if len(acks) == 0 {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, shareCallTimeout)
		defer cancel()
		ar, err := h.share.ShareAcknowledge(cctx, &storagev1.ShareAcknowledgeRequest{GroupId: group, MemberId: member, Acknowledgements: acks, LockDurationMs: lockMs})
		ackResults(ar.GetResults(), err)
	}
	if req.ShareSessionEpoch == -1 {
		acknowledgeOnly()
		h.releaseSession(ctx, key, chk.parts) // closed: chk.parts are the session's last
		return resp, nil
	}
	if renew {
		acknowledgeOnly()
		return resp, nil
	}

	// Then acquire over the session's partitions.
	refs, codes := h.shareRefs(ctx, chk.parts)
	var fetch []*storagev1.SharePartitionRef
	var at []sharePart
	for i, sp := range chk.parts {
		switch {
		case codes[i] != 0:
			out.part(sp).ErrorCode = codes[i]
		case !x.topic(kafkaacl.OpRead, refs[i].Topic):
			out.part(sp).ErrorCode = kerr.TopicAuthorizationFailed.Code
		default:
			fetch = append(fetch, refs[i])
			at = append(at, sp)
			if chk.added[sp] {
				out.part(sp) // a new partition of the session is answered once, even empty
			}
		}
	}
	if len(fetch) == 0 {
		acknowledgeOnly()
		return resp, nil
	}
	maxBytes := int64(req.MaxBytes)
	if maxBytes <= 0 || maxBytes > shareMaxBytes {
		maxBytes = shareMaxBytes
	}
	maxRecords := req.MaxRecords
	if maxRecords <= 0 {
		maxRecords = defaultShareMaxRecords
	}
	wait := min(time.Duration(max(req.MaxWaitMillis, 0))*time.Millisecond, maxShareWait)
	if h.drainCtx.Err() != nil {
		wait = 0
	}
	fctx, cancel := context.WithTimeout(ctx, wait+shareCallTimeout)
	defer cancel()
	stop := context.AfterFunc(h.drainCtx, cancel)
	defer stop()
	fr, buf, err := shareFetchOwned(fctx, h.share, &storagev1.ShareFetchRequest{
		GroupId: group, MemberId: member, Partitions: fetch, Acknowledgements: acks,
		MaxRecords: min(maxRecords, maxShareRecords), MaxBytes: maxBytes,
		LockDurationMs: lockMs, WaitMs: int32(wait.Milliseconds()),
		AutoOffsetReset: chk.cfg.reset, ByDurationMs: chk.cfg.byDurationMs, DeliveryCountLimit: chk.cfg.limit,
		IsolationLevel: chk.cfg.isolation, AsBatch: true,
	})
	if buf != nil {
		r.release = append(r.release, buf.release) // the batches are views of buf until written
	}
	ackResults(fr.GetAckResults(), err)
	for k, sp := range at {
		if err != nil {
			out.part(sp).ErrorCode = dataCode(err)
			continue
		}
		if k >= len(fr.GetPartitions()) {
			continue
		}
		pr := fr.GetPartitions()[k]
		if c := shareError(pr.GetError()); c != 0 {
			out.part(sp).ErrorCode = c
			continue
		}
		if b := pr.GetBatches(); len(b) > 0 {
			// storage-core's batch of the acquired records, passed on as it is.
			p := out.part(sp)
			p.Records = b
			p.AcquiredRecords = batchAcquiredRanges(pr.GetAcquired())
			continue
		}
		if len(pr.GetRecords()) == 0 {
			continue
		}
		p := out.part(sp)
		p.Records = shareBatch(pr.GetRecords())
		p.AcquiredRecords = acquiredRanges(pr.GetRecords())
	}
	return resp, nil
}

// shareFetchOut builds a ShareFetch response: one entry per partition, grouped by
// topic, in first-use order.
type shareFetchOut struct {
	resp  *kmsg.ShareFetchResponse
	topic map[[16]byte]int
	index map[sharePart]int
}

func newShareFetchOut(resp *kmsg.ShareFetchResponse) *shareFetchOut {
	return &shareFetchOut{resp: resp, topic: map[[16]byte]int{}, index: map[sharePart]int{}}
}

// part returns the response entry of sp, adding it when missing. The pointer is valid
// until the next call that adds an entry.
func (o *shareFetchOut) part(sp sharePart) *kmsg.ShareFetchResponseTopicPartition {
	ti, ok := o.topic[sp.id]
	if !ok {
		ti = len(o.resp.Topics)
		o.topic[sp.id] = ti
		t := kmsg.NewShareFetchResponseTopic()
		t.TopicID = sp.id
		o.resp.Topics = append(o.resp.Topics, t)
	}
	t := &o.resp.Topics[ti]
	pi, ok := o.index[sp]
	if !ok {
		pi = len(t.Partitions)
		o.index[sp] = pi
		p := kmsg.NewShareFetchResponseTopicPartition()
		p.Partition = sp.partition
		p.CurrentLeader.LeaderID, p.CurrentLeader.LeaderEpoch = -1, -1
		t.Partitions = append(t.Partitions, p)
	}
	return &t.Partitions[pi]
}
