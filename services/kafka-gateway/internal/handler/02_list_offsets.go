package handler

// ListOffsets (API key 2), versions 1-10.
//
// Behaviour, per partition (one storage-core LookupSequence each, run concurrently):
//   - -1 latest: the high watermark (read_committed, v2+: the last stable offset, the
//     first offset of the earliest open transaction, as storage-core answers it);
//     timestamp -1. read_committed lookups by time find nothing at or past it.
//   - -2 earliest and -4 earliest-local (v8+, KIP-405; no tiering here): the log start
//     offset; timestamp -1.
//   - -3 max timestamp (v7+, KIP-734): the record with the largest timestamp; offset -1,
//     timestamp -1 on an empty log.
//   - -5 latest-tiered (v9+, KIP-1005): nothing is tiered: offset -1, timestamp -1, once
//     the partition is known to exist (an unknown one is UNKNOWN_TOPIC_OR_PARTITION, as
//     for every timestamp).
//   - t >= 0: the first record with timestamp >= t; offset -1, timestamp -1 when none
//     (as Kafka).
//   - Leader epoch 0 on answers with an offset, -1 otherwise. Unknown topic/partition:
//     UNKNOWN_TOPIC_OR_PARTITION; storage outage: NOT_LEADER_OR_FOLLOWER (retriable).
//   - current_leader_epoch (v4+) other than -1 is checked against the partition's epoch,
//     0 (as Metadata reports it), after the partition is known to exist (Kafka:
//     Partition.localLogWithEpochOrThrow): above it UNKNOWN_LEADER_EPOCH, below it
//     FENCED_LEADER_EPOCH.
//   - Kafka's internal topics (channel.KafkaInternalTopics) answer as empty logs
//     (their records live in the coordinator's Postgres): latest and earliest 0,
//     every other lookup offset -1, timestamp -1; a partition past the topic's count
//     UNKNOWN_TOPIC_OR_PARTITION.
//   - With the authorizer on: DESCRIBE on each topic, else TOPIC_AUTHORIZATION_FAILED.
//   - A topic-partition listed more than once is INVALID_REQUEST and not looked up, in
//     every version (Kafka: ListOffsetsRequest.duplicatePartitions, checked first in
//     ReplicaManager.fetchOffset); like Kafka's answer, built from a map keyed by
//     topic-partition, the response holds each topic and partition once, here in order
//     of first appearance.
//
// KIPs: KIP-79 (v1 timestamps), KIP-98 (v2 isolation), KIP-207 (v5), KIP-320 (v4
// epochs), KIP-482 (flexible v6+), KIP-734, KIP-405, KIP-1005, KIP-1075 (v10 timeout).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/kafkaacl"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func init() { register(kmsg.ListOffsets.Int16(), 1, 10, (*Handler).handleListOffsets) }

func (h *Handler) handleListOffsets(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)

	type job struct {
		t, p     int // response slot; rp is set once every slot exists
		rp       *kmsg.ListOffsetsResponseTopicPartition
		ch       string
		ts       int64
		epochErr int16 // answer once the partition is known to exist
		// existsOnly: looked up only to learn that the partition exists (latest
		// tiered: nothing is tiered, so the answer stays offset -1).
		existsOnly bool
	}
	type tp struct {
		topic string
		part  int32
	}
	seen := make(map[tp]int)
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			seen[tp{t.Topic, p.Partition}]++
		}
	}
	x := h.access(ctx, r)
	topicAt := make(map[string]int, len(req.Topics))
	done := make(map[tp]bool, len(seen))
	var jobs []job
	for _, t := range req.Topics {
		ti, ok := topicAt[t.Topic]
		if !ok {
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = t.Topic
			ti = len(resp.Topics)
			resp.Topics = append(resp.Topics, rt)
			topicAt[t.Topic] = ti
		}
		valid := validTopicName(t.Topic)
		authorized := x.topic(kafkaacl.OpDescribe, t.Topic)
		internal, isInternal := channel.KafkaInternal(t.Topic)
		for _, p := range t.Partitions {
			k := tp{t.Topic, p.Partition}
			if done[k] {
				continue
			}
			done[k] = true
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			rp.Timestamp, rp.Offset, rp.LeaderEpoch = -1, -1, -1
			var epochErr int16
			switch {
			case req.Version < 4:
			case h.router == nil, isInternal:
				epochErr = leaderEpochCode(p.CurrentLeaderEpoch)
			case authorized && valid && p.Partition >= 0 && p.Partition < channel.MaxPartitions:
				epochErr = h.router.epochCode(ctx, channel.KafkaPartition(t.Topic, p.Partition), p.CurrentLeaderEpoch)
			}
			switch {
			case !authorized:
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case seen[k] > 1:
				rp.ErrorCode = kerr.InvalidRequest.Code
			case !valid, p.Partition < 0, p.Partition >= channel.MaxPartitions, isInternal && p.Partition >= internal.Partitions:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case isInternal && epochErr != 0:
				rp.ErrorCode = epochErr
			case isInternal:
				if ts := p.Timestamp; ts == -1 || ts == -2 || ts == -4 {
					rp.Offset, rp.LeaderEpoch = 0, 0 // an empty log: start = end = 0
				}
			default:
				ts := p.Timestamp
				if ts == -4 {
					ts = -2
				}
				existsOnly := ts == -5
				if epochErr != 0 || existsOnly {
					ts = -1 // looked up only to learn that the partition exists
				}
				jobs = append(jobs, job{t: ti, p: len(resp.Topics[ti].Partitions), ch: channel.KafkaPartition(t.Topic, p.Partition), ts: ts, epochErr: epochErr, existsOnly: existsOnly})
			}
			resp.Topics[ti].Partitions = append(resp.Topics[ti].Partitions, rp)
		}
	}
	for i := range jobs {
		jobs[i].rp = &resp.Topics[jobs[i].t].Partitions[jobs[i].p]
	}
	iso := storagev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED
	if req.Version >= 2 && req.IsolationLevel == 1 {
		iso = storagev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	}
	forEach(len(jobs), func(i int) {
		j := jobs[i]
		cctx, cancel := context.WithTimeout(ctx, storageCallTimeout)
		defer cancel()
		out, err := h.storage.LookupSequence(cctx, &storagev1.LookupSequenceRequest{Channel: j.ch, TimestampMs: j.ts, IsolationLevel: iso})
		if err != nil {
			j.rp.ErrorCode = dataCode(err)
			return
		}
		if j.epochErr != 0 {
			j.rp.ErrorCode = j.epochErr
			return
		}
		if !out.GetFound() || j.existsOnly {
			return
		}
		j.rp.Offset = channel.SequenceToOffset(out.GetSequence())
		j.rp.LeaderEpoch = h.leaderEpoch(j.ch)
		if j.ts >= 0 || j.ts == -3 {
			j.rp.Timestamp = out.GetTimestampMs()
		}
	})
	return resp, nil
}
