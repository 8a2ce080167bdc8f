package handler

// Share sessions and the share-group data path shared by ShareFetch (78) and
// ShareAcknowledge (79), KIP-932. A share session is per connection and (group,
// member), as Kafka's share session cache is per broker: epoch 0 opens one (a
// ShareFetch), each accepted request moves the epoch by one, -1 closes it. The records
// and their state live in storage-core's ShareService (one queue per share
// partition); the gateway keeps only the sessions, and releases a session's
// acquisitions when it closes (FINAL_EPOCH, or the connection closes, as Kafka's
// share session cache does on a disconnect). A member that stops talking with its
// connection open loses its acquisitions when their locks expire.

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/kafkabatch"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// ShareConfig holds the broker-level share group settings (Kafka's group.share.*).
type ShareConfig struct {
	// RecordLockDuration is group.share.record.lock.duration.ms (0 = 30 s): how long
	// an acquired record stays with its member; 1 s..1 h.
	RecordLockDuration time.Duration
	// DeliveryCountLimit is group.share.delivery.count.limit (0 = 5, Kafka allows
	// 2..10): deliveries after which a released or expired record is archived.
	DeliveryCountLimit int32
	// AutoOffsetResetEarliest starts new share partitions at the log start instead of
	// the high watermark (share.auto.offset.reset, default latest).
	AutoOffsetResetEarliest bool
}

func (c ShareConfig) lockMs() int32 {
	if c.RecordLockDuration <= 0 {
		return 30_000
	}
	return int32(c.RecordLockDuration.Milliseconds())
}

// Share defaults and bounds.
const (
	// defaultShareMaxRecords is used when a request's MaxRecords is 0 or less (v0
	// requests had none; Kafka's max.poll.records default).
	defaultShareMaxRecords = 500
	maxShareRecords        = 10_000
	maxShareMemberIDLen    = 36
	// shareMaxBytes caps a ShareFetch answer's record bytes, as Kafka's broker caps a
	// fetch with fetch.max.bytes (default 52428800): a request's MaxBytes of 0 or
	// less, or above it, gets the cap.
	shareMaxBytes = 50 << 20
	// maxShareWait bounds a ShareFetch long poll.
	maxShareWait = 60 * time.Second
	// shareCallTimeout bounds the storage calls that are not long polls.
	shareCallTimeout = 15 * time.Second
)

// sharePart is a partition of a share session, by topic id.
type sharePart struct {
	id        [16]byte
	partition int32
}

type shareKey struct{ group, member string }

type shareSession struct {
	epoch int32 // the epoch the next request must carry
	parts map[sharePart]struct{}
	cfg   groupShareConfig // the group's settings, read when the session opened
}

// groupShareConfig is what ShareFetch passes storage-core for a group: the group's
// own settings (KIP-932 group configs, coordinator GetShareGroupConfig) over the
// broker's (ShareConfig).
type groupShareConfig struct {
	lockMs       int32
	limit        int32
	reset        storagev1.ShareAutoOffsetReset
	byDurationMs int64
	// isolation is share.isolation.level (read_uncommitted unless the group sets
	// read_committed).
	isolation storagev1.IsolationLevel
}

// groupShareConfig reads group's share settings from the coordinator, the broker's
// standing in for those the group does not set (all of them without a coordinator
// connection: unit tests). An error means the coordinator could not be asked.
func (h *Handler) groupShareConfig(ctx context.Context, group string) (groupShareConfig, error) {
	c := groupShareConfig{lockMs: h.cfg.Share.lockMs(), limit: h.cfg.Share.DeliveryCountLimit,
		reset: storagev1.ShareAutoOffsetReset_SHARE_AUTO_OFFSET_RESET_LATEST}
	if h.cfg.Share.AutoOffsetResetEarliest {
		c.reset = storagev1.ShareAutoOffsetReset_SHARE_AUTO_OFFSET_RESET_EARLIEST
	}
	if h.shares == nil {
		return c, nil
	}
	cctx, cancel := groupCtx(ctx, groupCallTimeout)
	defer cancel()
	gc, err := h.shares.GetShareGroupConfig(cctx, &coordinatorv1.GetShareGroupConfigRequest{GroupId: group})
	if err != nil {
		return c, err
	}
	if gc.GetRecordLockDurationMs() > 0 {
		c.lockMs = gc.GetRecordLockDurationMs()
	}
	if gc.GetDeliveryCountLimit() > 0 {
		c.limit = gc.GetDeliveryCountLimit()
	}
	switch r := gc.GetAutoOffsetReset(); {
	case r == "latest":
		c.reset = storagev1.ShareAutoOffsetReset_SHARE_AUTO_OFFSET_RESET_LATEST
	case r == "earliest":
		c.reset = storagev1.ShareAutoOffsetReset_SHARE_AUTO_OFFSET_RESET_EARLIEST
	case strings.HasPrefix(r, "by_duration:") && gc.GetAutoOffsetResetDurationMs() > 0:
		c.reset = storagev1.ShareAutoOffsetReset_SHARE_AUTO_OFFSET_RESET_BY_DURATION
		c.byDurationMs = gc.GetAutoOffsetResetDurationMs()
	}
	if gc.GetIsolationLevel() == "read_committed" {
		c.isolation = storagev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	}
	return c, nil
}

// shareSessions are a connection's share sessions (Session.share).
type shareSessions struct {
	mu sync.Mutex
	m  map[shareKey]*shareSession
}

// shareSessionCheck is the outcome of opening, moving or closing a share session.
type shareSessionCheck struct {
	code  int16
	cfg   groupShareConfig // the session's
	parts []sharePart      // the session's partitions after the request (sorted)
	added map[sharePart]bool
}

// advance validates epoch for (group, member) and moves the session: 0 opens it with
// add (replacing one open already) and the group's settings cfg, -1 closes it, n must be its current epoch. add and
// forget change the partitions of an open session. ackOnly requests (ShareAcknowledge)
// cannot open one.
func (s *shareSessions) advance(k shareKey, epoch int32, add, forget []sharePart, ackOnly bool, cfg groupShareConfig) shareSessionCheck {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[shareKey]*shareSession{}
	}
	ss := s.m[k]
	out := shareSessionCheck{added: map[sharePart]bool{}}
	switch {
	case epoch == 0 && ackOnly:
		out.code = kerr.InvalidShareSessionEpoch.Code
		return out
	case epoch == 0:
		ss = &shareSession{parts: map[sharePart]struct{}{}, cfg: cfg}
		s.m[k] = ss
	case ss == nil:
		out.code = kerr.ShareSessionNotFound.Code
		return out
	case epoch == -1:
		delete(s.m, k)
	case epoch != ss.epoch:
		out.code = kerr.InvalidShareSessionEpoch.Code
		return out
	}
	for _, p := range add {
		if _, ok := ss.parts[p]; !ok {
			ss.parts[p] = struct{}{}
			out.added[p] = true
		}
	}
	for _, p := range forget {
		delete(ss.parts, p)
	}
	if epoch != -1 {
		ss.epoch++
		if ss.epoch < 0 {
			ss.epoch = 1 // wraps past MaxInt32 to 1, as Kafka's nextEpoch
		}
	}
	out.cfg = ss.cfg
	for p := range ss.parts {
		out.parts = append(out.parts, p)
	}
	sort.Slice(out.parts, func(i, j int) bool {
		a, b := out.parts[i], out.parts[j]
		if a.id != b.id {
			return string(a.id[:]) < string(b.id[:])
		}
		return a.partition < b.partition
	})
	return out
}

// drain removes every session, returning them (the connection closed).
func (s *shareSessions) drain() map[shareKey]*shareSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m
	s.m = nil
	return m
}

// ConnectionClosed releases the records the connection's share sessions hold, as
// Kafka releases a share session's acquisitions when its connection closes. The
// server calls it once the connection is done.
func (h *Handler) ConnectionClosed(sess *Session) {
	if sess == nil || h.share == nil {
		return
	}
	for k, ss := range sess.share.drain() {
		ps := make([]sharePart, 0, len(ss.parts))
		for p := range ss.parts {
			ps = append(ps, p)
		}
		h.releaseSession(context.Background(), k, ps)
	}
}

// shares returns the connection's share sessions (nil without a Session: tests).
func (s *Session) shares() *shareSessions {
	if s == nil {
		return nil
	}
	return &s.share
}

// releaseSession releases member's acquisitions in the session's partitions.
func (h *Handler) releaseSession(ctx context.Context, k shareKey, ps []sharePart) {
	refs, _ := h.shareRefs(ctx, ps)
	var named []*storagev1.SharePartitionRef
	for _, r := range refs {
		if r != nil {
			named = append(named, r)
		}
	}
	if len(named) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, shareCallTimeout)
	defer cancel()
	if _, err := h.share.ReleaseMember(cctx, &storagev1.ReleaseMemberRequest{GroupId: k.group, MemberId: k.member, Partitions: named}); err != nil {
		h.log.Warn("share session release failed; the records come back when their locks expire",
			zap.String("group", k.group), zap.String("member", k.member), zap.Error(err))
	}
}

// shareRefs resolves partitions by topic id: refs[i] is nil and codes[i] the Kafka
// error when the id names no topic (UNKNOWN_TOPIC_ID) or the partition is outside it
// (UNKNOWN_TOPIC_OR_PARTITION), or the coordinator cannot be asked.
func (h *Handler) shareRefs(ctx context.Context, ps []sharePart) (refs []*storagev1.SharePartitionRef, codes []int16) {
	refs, codes = make([]*storagev1.SharePartitionRef, len(ps)), make([]int16, len(ps))
	for i, p := range ps {
		ti, err := h.topicByID(ctx, p.id)
		switch {
		case err != nil:
			codes[i] = kerr.UnknownServerError.Code
			if h.coord != nil {
				codes[i] = kerr.CoordinatorNotAvailable.Code
			}
		case ti == nil || ti.Internal:
			codes[i] = kerr.UnknownTopicID.Code
		case p.partition < 0 || p.partition >= ti.Partitions:
			codes[i] = kerr.UnknownTopicOrPartition.Code
		default:
			refs[i] = &storagev1.SharePartitionRef{Topic: ti.Name, Partition: p.partition}
		}
	}
	return refs, codes
}

// shareError maps storage-core's per-partition ShareError to a Kafka code.
func shareError(e storagev1.ShareError) int16 {
	switch e {
	case storagev1.ShareError_SHARE_ERROR_UNSPECIFIED:
		return 0
	case storagev1.ShareError_SHARE_ERROR_UNKNOWN_PARTITION:
		return kerr.UnknownTopicOrPartition.Code
	case storagev1.ShareError_SHARE_ERROR_INVALID_RECORD_STATE:
		return kerr.InvalidRecordState.Code
	case storagev1.ShareError_SHARE_ERROR_INVALID_REQUEST:
		return kerr.InvalidRequest.Code
	}
	return kerr.KafkaStorageError.Code
}

// shareAckBatches converts Kafka acknowledgement batches; ok is false when one is
// malformed (INVALID_REQUEST): offsets backwards or overlapping the previous batch,
// no types or a count that is neither 1 nor one per offset, an unknown type, or
// RENEW (4) where renew is not allowed (KIP-1222: only with IsRenewAck, v2+).
func shareAckBatches(first, last []int64, types [][]int8, renew bool) ([]*storagev1.ShareAckBatch, bool) {
	out := make([]*storagev1.ShareAckBatch, len(first))
	prev := int64(-1)
	for i := range first {
		n := last[i] - first[i] + 1
		if first[i] < 0 || n < 1 || first[i] <= prev || len(types[i]) != 1 && int64(len(types[i])) != n {
			return nil, false
		}
		b := &storagev1.ShareAckBatch{FirstOffset: first[i], LastOffset: last[i], Types: make([]storagev1.ShareAcknowledgeType, len(types[i]))}
		for j, t := range types[i] {
			if t < 0 || t > 4 || t == 4 && !renew {
				return nil, false
			}
			b.Types[j] = storagev1.ShareAcknowledgeType(t)
		}
		out[i] = b
		prev = last[i]
	}
	return out, true
}

// shareBatch encodes acquired records as one uncompressed RecordBatch v2 at their
// offsets (gaps between them are allowed, as after compaction); the records keep
// their timestamps, keys, values and headers. Records come in offset order. The
// batch is written by libs/kafkabatch into one buffer of its exact size: byte for
// byte what kmsg.RecordBatch.AppendTo of kmsg.Records gives (libs/kafkabatch TestEncodeMatchesKmsg).
// This path serves a storage-core that answers records one by one (older than
// as_batch); a current one sends the batch itself.
func shareBatch(recs []*storagev1.ShareAcquiredRecord) []byte {
	return kafkabatch.Encode(len(recs), func(i int) kafkabatch.Record {
		r := recs[i].GetRecord()
		var hs []kafkabatch.Header
		if n := len(r.GetHeaders()); n > 0 {
			hs = make([]kafkabatch.Header, n)
			for j, hd := range r.GetHeaders() {
				hs[j] = kafkabatch.Header{Key: hd.GetKey(), Value: hd.GetValue()}
			}
		}
		return kafkabatch.Record{Offset: r.GetSequence() - 1, TimestampMs: r.GetTimestampMs(), Key: r.Key, Value: r.Value, Headers: hs}
	})
}

// acquiredRanges groups records into AcquiredRecords ranges: consecutive offsets of
// one delivery count.
func acquiredRanges(recs []*storagev1.ShareAcquiredRecord) []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord {
	var out []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
	for _, r := range recs {
		off, dc := r.GetRecord().GetSequence()-1, int16(min(r.GetDeliveryCount(), 32767))
		if n := len(out); n > 0 && out[n-1].LastOffset+1 == off && out[n-1].DeliveryCount == dc {
			out[n-1].LastOffset = off
			continue
		}
		ar := kmsg.NewShareFetchResponseTopicPartitionAcquiredRecord()
		ar.FirstOffset, ar.LastOffset, ar.DeliveryCount = off, off, dc
		out = append(out, ar)
	}
	return out
}

// batchAcquiredRanges converts storage-core's acquired ranges (ShareFetch answers
// with a batch) to AcquiredRecords.
func batchAcquiredRanges(rs []*storagev1.ShareAcquiredRange) []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord {
	out := make([]kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, len(rs))
	for i, r := range rs {
		out[i] = kmsg.NewShareFetchResponseTopicPartitionAcquiredRecord()
		out[i].FirstOffset, out[i].LastOffset = r.GetFirstOffset(), r.GetLastOffset()
		out[i].DeliveryCount = int16(min(r.GetDeliveryCount(), 32767))
	}
	return out
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
