package server

import (
	"context"
	"errors"
	"time"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/kafkabatch"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/storage-core/internal/queue"
	"github.com/tributary/tributary/services/storage-core/internal/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// shareService serves tributary.storage.v1.ShareService (Kafka KIP-932 share
// partitions) over internal/queue's share verbs (queue/share.go).
type shareService struct {
	storagev1.UnimplementedShareServiceServer
	s  *service
	qm *queue.Manager
}

// Bounds of ShareFetchRequest.
const (
	maxShareRecords     = 10_000
	defaultShareLockMs  = 30_000
	maxShareMemberIDLen = 36
	// maxShareFetchBytes bounds the record bytes one ShareFetch acquires when max_bytes
	// is 0 (no limit) or larger: a quarter of the bus's message limit, so the answer
	// always fits in one gRPC message. Records acquired for an answer that cannot be
	// sent would have their delivery counts raised without ever being delivered.
	maxShareFetchBytes = grpcx.MaxMessageBytes / 4
)

// shareFetchBytes is the byte limit of a ShareFetch: max_bytes, or maxShareFetchBytes
// when that is 0 or larger.
func shareFetchBytes(maxBytes int64) int64 {
	if maxBytes <= 0 || maxBytes > maxShareFetchBytes {
		return maxShareFetchBytes
	}
	return maxBytes
}

// shareError maps a per-partition error to its ShareError. A share partition without
// state (queue.ErrNotFound: never started, or deleted by DeleteShareGroupOffsets or
// DeleteGroups) is UNKNOWN_PARTITION, as Kafka's SharePartitionManager answers
// UNKNOWN_TOPIC_OR_PARTITION for an acknowledgement to a share partition it does not
// hold; INVALID_RECORD_STATE is only for offsets existing state does not let the
// member acknowledge.
func shareError(err error) (storagev1.ShareError, string) {
	switch {
	case err == nil:
		return storagev1.ShareError_SHARE_ERROR_UNSPECIFIED, ""
	case errors.Is(err, store.ErrNotFound), errors.Is(err, channel.ErrInvalidTopic), errors.Is(err, channel.ErrInvalidPartition),
		errors.Is(err, queue.ErrNotQueue), errors.Is(err, queue.ErrNotFound):
		return storagev1.ShareError_SHARE_ERROR_UNKNOWN_PARTITION, err.Error()
	case errors.Is(err, queue.ErrInvalidRecordState):
		return storagev1.ShareError_SHARE_ERROR_INVALID_RECORD_STATE, err.Error()
	case errors.Is(err, queue.ErrInvalidArgument), errors.Is(err, channel.ErrInvalidName):
		return storagev1.ShareError_SHARE_ERROR_INVALID_REQUEST, err.Error()
	}
	return storagev1.ShareError_SHARE_ERROR_STORAGE_FAILURE, err.Error()
}

func checkShareIDs(group, member string, needMember bool) error {
	if group == "" {
		return status.Error(codes.InvalidArgument, "empty group_id")
	}
	if needMember && (member == "" || len(member) > maxShareMemberIDLen) {
		return status.Errorf(codes.InvalidArgument, "member_id of %d bytes; 1..%d allowed", len(member), maxShareMemberIDLen)
	}
	return nil
}

func shareAckBatches(bs []*storagev1.ShareAckBatch) []queue.ShareAckBatch {
	out := make([]queue.ShareAckBatch, len(bs))
	for i, b := range bs {
		ts := make([]uint8, len(b.GetTypes()))
		for j, t := range b.GetTypes() {
			if t < 0 || t > 255 {
				t = 255 // refused by CheckShareAcks
			}
			ts[j] = uint8(t)
		}
		out[i] = queue.ShareAckBatch{First: b.GetFirstOffset(), Last: b.GetLastOffset(), Types: ts}
	}
	return out
}

// acknowledge applies each partition's acknowledgements (all or nothing per
// partition), durable when it returns.
func (ss *shareService) acknowledge(group, member string, acks []*storagev1.SharePartitionAcks, lockMs int64) []*storagev1.ShareAckResult {
	release := ss.qm.HoldCommits() // every partition's commit queued before one starts
	finish := ss.acknowledgeStart(group, member, acks, lockMs)
	release()
	return finish()
}

// acknowledgeStart applies each partition's acknowledgements in memory and queues
// their commits; finish waits until they are durable and returns the results. Every
// commit queued under the caller's HoldCommits shares one fdatasync.
func (ss *shareService) acknowledgeStart(group, member string, acks []*storagev1.SharePartitionAcks, lockMs int64) (finish func() []*storagev1.ShareAckResult) {
	out := make([]*storagev1.ShareAckResult, len(acks))
	waits := make([]func() error, len(acks))
	for i, a := range acks {
		out[i] = &storagev1.ShareAckResult{Topic: a.GetTopic(), Partition: a.GetPartition()}
		q, err := ss.qm.SharePartition(group, a.GetTopic(), a.GetPartition(), false, queue.ShareReset{}, 0)
		if err == nil {
			waits[i], err = q.ShareAckStart(member, shareAckBatches(a.GetBatches()), lockMs)
		}
		out[i].Error, out[i].Message = shareError(err)
	}
	return func() []*storagev1.ShareAckResult {
		// A result is answered only once its acknowledgements are durable.
		for i, wait := range waits {
			if wait != nil {
				out[i].Error, out[i].Message = shareError(wait())
			}
		}
		return out
	}
}

func shareLockMs(ms int32) int64 {
	if ms == 0 {
		return defaultShareLockMs
	}
	return int64(ms)
}

func (ss *shareService) ShareFetch(ctx context.Context, req *storagev1.ShareFetchRequest) (_ *storagev1.ShareFetchResponse, err error) {
	defer func() { ss.s.count("ShareFetch", err) }()
	if err := checkShareIDs(req.GroupId, req.MemberId, true); err != nil {
		return nil, err
	}
	lockMs := shareLockMs(req.LockDurationMs)
	switch {
	case req.MaxRecords < 1 || req.MaxRecords > maxShareRecords:
		return nil, status.Errorf(codes.InvalidArgument, "max_records %d outside [1, %d]", req.MaxRecords, maxShareRecords)
	case lockMs < queue.MinShareLockMs || lockMs > queue.MaxShareLockMs:
		return nil, status.Errorf(codes.InvalidArgument, "lock_duration_ms %d outside [%d, %d]", lockMs, queue.MinShareLockMs, queue.MaxShareLockMs)
	case req.WaitMs < 0 || req.MaxBytes < 0 || req.ByDurationMs < 0:
		return nil, status.Error(codes.InvalidArgument, "wait_ms, max_bytes and by_duration_ms must not be negative")
	case req.DeliveryCountLimit != 0 && (req.DeliveryCountLimit < 2 || req.DeliveryCountLimit > 10):
		return nil, status.Errorf(codes.InvalidArgument, "delivery_count_limit %d outside [2, 10]", req.DeliveryCountLimit)
	case checkIsolation(req.IsolationLevel) != nil:
		return nil, checkIsolation(req.IsolationLevel)
	}
	// The acknowledgements apply before acquiring, their commit (one for all
	// partitions) runs under the acquisitions, which write nothing (Kafka's
	// SharePartition.acquire), and is waited for before the answer.
	release := ss.qm.HoldCommits()
	acked := ss.acknowledgeStart(req.GroupId, req.MemberId, req.Acknowledgements, lockMs)
	release()
	resp := &storagev1.ShareFetchResponse{}
	defer func() { resp.AckResults = acked() }()
	reset := queue.ShareReset{Earliest: req.AutoOffsetReset == storagev1.ShareAutoOffsetReset_SHARE_AUTO_OFFSET_RESET_EARLIEST,
		ReadCommitted: req.IsolationLevel == storagev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED}
	if req.AutoOffsetReset == storagev1.ShareAutoOffsetReset_SHARE_AUTO_OFFSET_RESET_BY_DURATION {
		reset.ByDurationMs = max(req.ByDurationMs, 1)
	}
	resp.Partitions = make([]*storagev1.SharePartitionRecords, len(req.Partitions))
	var qs []*queue.Queue
	var idx []int // resp.Partitions index of qs[i]
	for i, p := range req.Partitions {
		pr := &storagev1.SharePartitionRecords{Topic: p.GetTopic(), Partition: p.GetPartition()}
		resp.Partitions[i] = pr
		q, err := ss.qm.SharePartition(req.GroupId, p.GetTopic(), p.GetPartition(), true, reset, req.DeliveryCountLimit)
		if err != nil {
			pr.Error, pr.Message = shareError(err)
			continue
		}
		q.SetShareIsolation(reset.ReadCommitted)
		qs = append(qs, q)
		idx = append(idx, i)
	}
	if len(qs) == 0 {
		return resp, nil
	}
	wctx, cancel := ss.s.waitCtx(ctx)
	defer cancel()
	recs, errs, err := ss.qm.ShareFetch(wctx, qs, queue.ShareFetchArgs{
		Member: req.MemberId, MaxRecords: int(req.MaxRecords), MaxBytes: shareFetchBytes(req.MaxBytes), LockMs: lockMs,
		Wait: min(time.Duration(req.WaitMs)*time.Millisecond, maxWait),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	for k, i := range idx {
		pr := resp.Partitions[i]
		if errors.Is(errs[k], queue.ErrNotFound) {
			// The state was deleted under the wait (DeleteShareGroupOffsets): nothing
			// was acquired, so the partition answers empty, as Kafka's does.
			continue
		}
		if errs[k] != nil {
			pr.Error, pr.Message = shareError(errs[k])
			continue
		}
		if req.AsBatch {
			if len(recs[k]) > 0 {
				pr.Batches, pr.Acquired = shareRecordBatch(recs[k]), shareAcquiredRanges(recs[k])
			}
			continue
		}
		pr.Records = make([]*storagev1.ShareAcquiredRecord, len(recs[k]))
		for j, r := range recs[k] {
			pr.Records[j] = &storagev1.ShareAcquiredRecord{Record: shareRecordToProto(r.Record), DeliveryCount: r.DeliveryCount}
		}
	}
	return resp, nil
}

// shareAcquiredRanges groups acquired records (in offset order) into ranges of
// consecutive offsets of one delivery count (Kafka's AcquiredRecords).
func shareAcquiredRanges(recs []queue.ShareRecord) []*storagev1.ShareAcquiredRange {
	var out []*storagev1.ShareAcquiredRange
	for _, r := range recs {
		off := r.Record.Offset
		if n := len(out); n > 0 && out[n-1].LastOffset+1 == off && out[n-1].DeliveryCount == r.DeliveryCount {
			out[n-1].LastOffset = off
			continue
		}
		out = append(out, &storagev1.ShareAcquiredRange{FirstOffset: off, LastOffset: off, DeliveryCount: r.DeliveryCount})
	}
	return out
}

// shareRecordBatch encodes acquired records (in offset order, gaps allowed) as one
// uncompressed Kafka RecordBatch v2 at their source offsets, keeping their
// timestamps, keys, values and headers: what the gateway answers a ShareFetch with.
// It is written by libs/kafkabatch into one buffer of its exact size, byte for byte
// what kmsg.RecordBatch.AppendTo of kmsg.Records gives (libs/kafkabatch TestEncodeMatchesKmsg).
// A message per record would cost the marshalling here and the unmarshalling and
// encoding in the gateway.
func shareRecordBatch(recs []queue.ShareRecord) []byte {
	return kafkabatch.Encode(len(recs), func(i int) kafkabatch.Record {
		r := &recs[i].Record
		return kafkabatch.Record{Offset: r.Offset, TimestampMs: r.Timestamp, Key: r.Key, Value: r.Value, Headers: r.Headers}
	})
}

// shareRecordToProto is the source record of an acquisition (Offset the source's).
func shareRecordToProto(r store.Record) *storagev1.Record {
	return &storagev1.Record{
		Sequence: channel.OffsetToSequence(r.Offset), TimestampMs: r.Timestamp, Key: r.Key, Value: r.Value,
		Headers: headersToProto(r.Headers), ProducerId: -1, ProducerEpoch: -1,
	}
}

func (ss *shareService) ShareAcknowledge(_ context.Context, req *storagev1.ShareAcknowledgeRequest) (_ *storagev1.ShareAcknowledgeResponse, err error) {
	defer func() { ss.s.count("ShareAcknowledge", err) }()
	if err := checkShareIDs(req.GroupId, req.MemberId, true); err != nil {
		return nil, err
	}
	return &storagev1.ShareAcknowledgeResponse{Results: ss.acknowledge(req.GroupId, req.MemberId, req.Acknowledgements, shareLockMs(req.LockDurationMs))}, nil
}

func (ss *shareService) ReleaseMember(_ context.Context, req *storagev1.ReleaseMemberRequest) (_ *storagev1.ReleaseMemberResponse, err error) {
	defer func() { ss.s.count("ReleaseMember", err) }()
	if err := checkShareIDs(req.GroupId, req.MemberId, true); err != nil {
		return nil, err
	}
	var ids []queue.SharePartitionID
	if len(req.Partitions) == 0 {
		ids = ss.qm.ShareList(req.GroupId)
	}
	for _, p := range req.Partitions {
		ids = append(ids, queue.SharePartitionID{Topic: p.GetTopic(), Partition: p.GetPartition()})
	}
	var n int64
	for _, id := range ids {
		q, err := ss.qm.SharePartition(req.GroupId, id.Topic, id.Partition, false, queue.ShareReset{}, 0)
		if err != nil {
			continue // no state: nothing held there
		}
		k, err := q.ShareRelease(req.MemberId)
		if err != nil && !errors.Is(err, queue.ErrNotFound) {
			return nil, toStatus(err)
		}
		n += int64(k)
	}
	return &storagev1.ReleaseMemberResponse{Released: n}, nil
}

// state describes one partition; start_offset and lag -1 without state.
func (ss *shareService) state(group, topic string, partition int32) *storagev1.SharePartitionState {
	st := &storagev1.SharePartitionState{Topic: topic, Partition: partition, StartOffset: -1, Lag: -1}
	q, err := ss.qm.SharePartition(group, topic, partition, false, queue.ShareReset{}, 0)
	if err == nil {
		st.StartOffset, st.Lag, err = q.ShareState()
	}
	if err != nil && !errors.Is(err, queue.ErrNotFound) {
		st.StartOffset, st.Lag = -1, -1
		st.Error, st.Message = shareError(err)
	}
	return st
}

func (ss *shareService) DescribeSharePartitions(_ context.Context, req *storagev1.DescribeSharePartitionsRequest) (_ *storagev1.DescribeSharePartitionsResponse, err error) {
	defer func() { ss.s.count("DescribeSharePartitions", err) }()
	if err := checkShareIDs(req.GroupId, "", false); err != nil {
		return nil, err
	}
	resp := &storagev1.DescribeSharePartitionsResponse{}
	for _, p := range req.Partitions {
		resp.Partitions = append(resp.Partitions, ss.state(req.GroupId, p.GetTopic(), p.GetPartition()))
	}
	return resp, nil
}

func (ss *shareService) ListSharePartitions(_ context.Context, req *storagev1.ListSharePartitionsRequest) (_ *storagev1.ListSharePartitionsResponse, err error) {
	defer func() { ss.s.count("ListSharePartitions", err) }()
	if err := checkShareIDs(req.GroupId, "", false); err != nil {
		return nil, err
	}
	resp := &storagev1.ListSharePartitionsResponse{}
	for _, id := range ss.qm.ShareList(req.GroupId) {
		if st := ss.state(req.GroupId, id.Topic, id.Partition); st.StartOffset >= 0 || st.Error != 0 {
			resp.Partitions = append(resp.Partitions, st)
		}
	}
	return resp, nil
}

func (ss *shareService) AlterSharePartitions(_ context.Context, req *storagev1.AlterSharePartitionsRequest) (_ *storagev1.AlterSharePartitionsResponse, err error) {
	defer func() { ss.s.count("AlterSharePartitions", err) }()
	if err := checkShareIDs(req.GroupId, "", false); err != nil {
		return nil, err
	}
	resp := &storagev1.AlterSharePartitionsResponse{}
	for _, p := range req.Partitions {
		if _, err := ss.qm.ShareAlter(req.GroupId, p.GetTopic(), p.GetPartition(), p.GetStartOffset()); err != nil {
			st := &storagev1.SharePartitionState{Topic: p.GetTopic(), Partition: p.GetPartition(), StartOffset: -1, Lag: -1}
			st.Error, st.Message = shareError(err)
			resp.Partitions = append(resp.Partitions, st)
			continue
		}
		resp.Partitions = append(resp.Partitions, ss.state(req.GroupId, p.GetTopic(), p.GetPartition()))
	}
	return resp, nil
}

func (ss *shareService) DeleteSharePartitions(_ context.Context, req *storagev1.DeleteSharePartitionsRequest) (_ *storagev1.DeleteSharePartitionsResponse, err error) {
	defer func() { ss.s.count("DeleteSharePartitions", err) }()
	if err := checkShareIDs(req.GroupId, "", false); err != nil {
		return nil, err
	}
	resp := &storagev1.DeleteSharePartitionsResponse{}
	for _, p := range req.Partitions {
		st := &storagev1.SharePartitionState{Topic: p.GetTopic(), Partition: p.GetPartition(), StartOffset: -1, Lag: -1}
		st.Error, st.Message = shareError(ss.qm.ShareDelete(req.GroupId, p.GetTopic(), p.GetPartition()))
		resp.Partitions = append(resp.Partitions, st)
	}
	return resp, nil
}
