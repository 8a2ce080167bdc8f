package handler

// Fetch (API key 1), versions 4-16.
//
// Behaviour:
//   - ONE storage-core Fetch call for every partition of the request: from_sequence =
//     fetch_offset + 1, max_wait_ms / min_bytes / max_bytes / partition_max_bytes and
//     the isolation level passed through. Stored batches are returned byte for byte (the
//     first may start before the fetch offset; clients skip those records).
//   - Every partition response carries HighWatermark, LastStableOffset and LogStartOffset,
//     error or not (-1 when unknown); responses keep request order.
//   - fetch_offset == high watermark is the normal tail: empty, after waiting. Below the
//     log start or above the high watermark: OFFSET_OUT_OF_RANGE (storage-core decides).
//   - v13+ identifies topics by id (KIP-516): an unknown id is UNKNOWN_TOPIC_ID.
//   - Aborted transactions are never sent on read_uncommitted (franz-go would skip
//     records); read_committed stops at the last stable offset and gets the aborted
//     transactions overlapping the answer from storage-core (first offset = first
//     sequence - 1; an empty list when none), so clients drop their records. Control
//     batches (markers) are served as stored; clients skip them.
//   - Fetch sessions (KIP-227) are not kept: every answer has session id 0, which all
//     clients accept as "sessionless"; a request naming a session id we never handed out
//     gets FETCH_SESSION_ID_NOT_FOUND. Forgotten topics are therefore ignored.
//   - v9+ current_leader_epoch (KIP-320) is checked as ListOffsets does (leaderEpochCode:
//     the leader epoch is 0 forever): a partition that exists answers
//     UNKNOWN_LEADER_EPOCH above it and FENCED_LEADER_EPOCH below it, with no records
//     and offsets -1, before its fetch offset is looked at; such an answer is sent
//     without waiting, as Kafka completes a fetch with a partition error at once.
//   - With the authorizer on: READ on each topic, else TOPIC_AUTHORIZATION_FAILED for
//     its partitions (an unknown topic id stays UNKNOWN_TOPIC_ID).
//   - Kafka's internal topics (channel.KafkaInternalTopics, listed by Metadata) are
//     read as empty logs: READ decides as for any topic, then offset 0 is the log
//     start and the high watermark (an empty answer, after max_wait_ms when nothing
//     else is asked), any other offset OFFSET_OUT_OF_RANGE, a partition past the
//     topic's count UNKNOWN_TOPIC_OR_PARTITION. Kafka serves its offset and
//     transaction records there; ours live in the coordinator's Postgres.
//   - Preferred read replica (KIP-392): never set (-1); any replica serves any partition.
//   - Fetch-ahead (fetchahead.go): when every partition of an answer returned data and
//     has more, the next ranges are read from storage-core right away, and the
//     consumer's next Fetch for exactly those ranges is answered from that read.
//   - On shutdown (Handler.Drain) a waiting long poll ends with NOT_LEADER_OR_FOLLOWER so
//     the client refreshes its metadata and moves to a live replica.
//
// KIPs: KIP-74 (max_bytes), KIP-98 (isolation), KIP-227 (sessions), KIP-320 (leader
// epochs), KIP-392, KIP-482 (flexible v12+), KIP-516 (topic ids v13+), KIP-951 (v16).

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/kafkaacl"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func init() { register(kmsg.Fetch.Int16(), 4, 16, (*Handler).handleFetch) }

// fetchMaxWait caps a client's max_wait_ms.
const fetchMaxWait = 5 * time.Minute

func (h *Handler) handleFetch(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.FetchRequest)
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	resp.SessionID = 0

	if req.Version >= 7 && req.SessionID != 0 {
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return resp, nil
	}
	if req.Version >= 7 && req.SessionEpoch > 0 {
		resp.ErrorCode = kerr.InvalidFetchSessionEpoch.Code
		return resp, nil
	}

	// slot is where a storage result goes; epochErr, when set, is the partition's
	// answer once storage-core confirmed it exists (leaderEpochCode).
	type slot struct {
		t, p     int
		epochErr int16
	}
	var (
		channels []*storagev1.FetchChannel
		slots    []slot
		fenced   bool // a slot has an epochErr
		idle     bool // an internal topic's partition waits for records (internalFetch)
	)
	x := h.access(ctx, r)
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		rt.TopicID = t.TopicID
		name := t.Topic
		topicCode := int16(0)
		if req.Version >= 13 {
			ti, err := h.topicByID(ctx, t.TopicID)
			if it := h.internalTopic("", t.TopicID); it != nil {
				ti, err = it, nil
			}
			switch {
			case err != nil:
				topicCode = kerr.NotLeaderForPartition.Code
			case ti == nil:
				topicCode = kerr.UnknownTopicID.Code
			default:
				name = ti.Name
			}
		}
		switch {
		case topicCode != 0:
		case !x.topic(kafkaacl.OpRead, name):
			topicCode = kerr.TopicAuthorizationFailed.Code
		case req.Version < 13 && !validTopicName(name):
			topicCode = kerr.UnknownTopicOrPartition.Code
		}
		internal, isInternal := channel.KafkaInternal(name)
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = p.Partition
			rp.HighWatermark = -1
			rp.LastStableOffset = -1
			rp.LogStartOffset = -1
			rp.PreferredReadReplica = -1
			// Kafka always sends records, empty rather than null: librdkafka fails to
			// parse a null record set ("invalid MessageSetSize -1").
			rp.RecordBatches = []byte{}
			var epochErr int16
			switch {
			case req.Version < 9:
			case h.router == nil, isInternal:
				epochErr = leaderEpochCode(p.CurrentLeaderEpoch)
			case topicCode == 0 && p.Partition >= 0 && p.Partition < channel.MaxPartitions:
				epochErr = h.router.epochCode(ctx, channel.KafkaPartition(name, p.Partition), p.CurrentLeaderEpoch)
			}
			switch {
			case topicCode != 0:
				rp.ErrorCode = topicCode
			case p.Partition < 0 || p.Partition >= channel.MaxPartitions:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case isInternal:
				rp.ErrorCode = internalFetch(&rp, internal, p.FetchOffset, epochErr)
				idle = idle || rp.ErrorCode == 0
			case epochErr != 0:
				// Read only to learn that the partition exists: the least data, from
				// a valid sequence whatever the fetch offset.
				channels = append(channels, &storagev1.FetchChannel{
					Channel:      channel.KafkaPartition(name, p.Partition),
					FromSequence: max(channel.OffsetToSequence(p.FetchOffset), 1),
					MaxBytes:     1,
				})
				slots = append(slots, slot{len(resp.Topics), len(rt.Partitions), epochErr})
				fenced = true
			case p.FetchOffset < 0:
				rp.ErrorCode = kerr.OffsetOutOfRange.Code
			default:
				maxBytes := p.PartitionMaxBytes
				channels = append(channels, &storagev1.FetchChannel{
					Channel:      channel.KafkaPartition(name, p.Partition),
					FromSequence: channel.OffsetToSequence(p.FetchOffset),
					MaxBytes:     maxBytes,
				})
				slots = append(slots, slot{len(resp.Topics), len(rt.Partitions), 0})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(channels) == 0 {
		if idle {
			// Nothing will ever arrive: wait as Kafka waits on an empty partition.
			h.idleWait(ctx, time.Duration(req.MaxWaitMillis)*time.Millisecond)
		}
		return resp, nil
	}

	wait := time.Duration(req.MaxWaitMillis) * time.Millisecond
	if wait < 0 {
		wait = 0
	}
	if wait > fetchMaxWait {
		wait = fetchMaxWait
	}
	maxBytes := req.MaxBytes
	if req.Version < 3 || maxBytes <= 0 {
		maxBytes = 1 << 30
	}
	iso := storagev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED
	if req.IsolationLevel == 1 {
		iso = storagev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	}
	if h.drainCtx.Err() != nil || fenced {
		wait = 0
	}
	sctx, cancel := context.WithTimeout(ctx, wait+15*time.Second)
	defer cancel()
	stop := context.AfterFunc(h.drainCtx, cancel)
	defer stop()
	sreq := &storagev1.FetchRequest{
		Channels:       channels,
		MaxWaitMs:      int32(wait / time.Millisecond),
		MinBytes:       req.MinBytes,
		MaxBytes:       maxBytes,
		IsolationLevel: iso,
	}
	keys := make([]fetchAheadKey, len(channels))
	for i, fc := range channels {
		keys[i] = fetchAheadKey{channel: fc.Channel, from: fc.FromSequence, maxBytes: fc.MaxBytes, iso: iso}
	}
	var out *storagev1.FetchResponse
	var err error
	if res, release, ok := h.ahead.take(sctx, keys, req.MinBytes); ok {
		out = &storagev1.FetchResponse{Results: res}
		r.release = append(r.release, release)
	} else {
		var buf *fetchBuf
		out, buf, err = fetchOwned(sctx, h.storage, sreq)
		if buf != nil {
			r.release = append(r.release, buf.release)
		}
	}
	if err == nil && h.drainCtx.Err() == nil && !fenced {
		h.ahead.start(h.storage, h.drainCtx, sreq, out.GetResults())
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		code := dataCode(err)
		h.log.Warn("storage Fetch failed", zap.Int("partitions", len(channels)), zap.Int16("kafka_code", code), zap.Error(err))
		for _, s := range slots {
			resp.Topics[s.t].Partitions[s.p].ErrorCode = code
		}
		return resp, nil
	}
	results := out.GetResults()
	bytesOut := 0
	for i, s := range slots {
		rp := &resp.Topics[s.t].Partitions[s.p]
		if i >= len(results) {
			rp.ErrorCode = kerr.KafkaStorageError.Code
			continue
		}
		res := results[i]
		if s.epochErr != 0 && res.GetError() != storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND {
			rp.ErrorCode = s.epochErr // it exists: the epoch decides (offsets stay -1)
			continue
		}
		if res.GetError() != storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED {
			rp.ErrorCode = storageCode(res.GetError())
			if res.GetError() == storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND {
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
				continue
			}
		}
		fillOffsets(rp, res)
		if iso == storagev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED {
			rp.AbortedTransactions = abortedTransactions(res.GetAbortedTransactions())
		}
		if b := res.GetBatches(); len(b) > 0 {
			rp.RecordBatches = b
		}
		bytesOut += len(rp.RecordBatches)
	}
	h.metrics.addFetchBytes(bytesOut)
	return resp, nil
}

// fillOffsets sets a partition's HighWatermark, LastStableOffset and LogStartOffset from
// a storage result. The storage high watermark (sequence of the last durable record) is
// numerically the Kafka high watermark; the Kafka log start offset is
// log_start_sequence - 1. storage-core's last stable sequence is numerically the Kafka
// last stable offset (the high watermark without open transactions; 0 when one opens
// the log); a value outside [0, HWM] is taken as the high watermark.
func fillOffsets(rp *kmsg.FetchResponseTopicPartition, res *storagev1.FetchChannelResult) {
	hwm := res.GetHighWatermark()
	rp.HighWatermark = hwm
	lso := res.GetLastStableSequence()
	if lso < 0 || lso > hwm {
		lso = hwm
	}
	rp.LastStableOffset = lso
	ls := channel.SequenceToOffset(res.GetLogStartSequence())
	if ls < 0 {
		ls = 0
	}
	rp.LogStartOffset = ls
}

// abortedTransactions converts storage-core's aborted transactions (first sequences)
// into Kafka's (first offsets = first sequence - 1); never nil, so read_committed
// answers always carry the (possibly empty) list.
func abortedTransactions(in []*storagev1.AbortedTransaction) []kmsg.FetchResponseTopicPartitionAbortedTransaction {
	out := make([]kmsg.FetchResponseTopicPartitionAbortedTransaction, 0, len(in))
	for _, a := range in {
		at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
		at.ProducerID, at.FirstOffset = a.GetProducerId(), channel.SequenceToOffset(a.GetFirstSequence())
		out = append(out, at)
	}
	return out
}
