package handler

// OffsetForLeaderEpoch (API key 23), versions 2-4.
//
// With one storage node every partition has leader epoch 0 forever (one durable copy,
// any replica serves it). With several (raft mode, epochs.go) the leader epoch is the
// term of the channel's Raft group, and each partition is asked of its leader
// (storage-core OffsetForLeaderEpoch, answered from the channel's leader-epoch index
// as Kafka's leader answers from its leader-epoch cache): for the current epoch, that
// epoch and the high watermark; for an older one, the largest epoch at or below it and
// the start offset of the next epoch; one above the current or below 0 epoch -1 /
// offset -1 (UNDEFINED). current_leader_epoch is checked against the term that answer
// was computed in (FENCED_LEADER_EPOCH below it, UNKNOWN_LEADER_EPOCH above, -1 not
// checked), as Kafka's Partition.checkCurrentLeaderEpoch does. Behaviour with one node,
// per partition: a requested epoch of 0 or more returns epoch 0 and end
// offset = the high watermark (storage-core GetChannel; stored batches keep the
// partitionLeaderEpoch their producer sent, so a consumer may ask with any epoch and
// must not see a truncation); a current_leader_epoch above 0
// is UNKNOWN_LEADER_EPOCH (the client knows an epoch we never handed out), one below 0
// other than -1 (not given) is FENCED_LEADER_EPOCH (leaderEpochCode, shared with
// ListOffsets; Kafka's Partition.checkCurrentLeaderEpoch); a requested
// epoch below 0 returns epoch -1 / offset -1 (UNDEFINED). Unknown partition:
// UNKNOWN_TOPIC_OR_PARTITION; storage outage: NOT_LEADER_OR_FOLLOWER. Kafka's
// internal topics (channel.KafkaInternalTopics) are empty logs at epoch 0: epoch 0
// ends at offset 0, any other is UNDEFINED. With the authorizer on: DESCRIBE on
// each topic, else TOPIC_AUTHORIZATION_FAILED.
//
// KIPs: KIP-101, KIP-279, KIP-320 (v2 current epoch), KIP-392 (v3 replica id),
// KIP-482 (flexible v4).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/kafkaacl"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func init() {
	register(kmsg.OffsetForLeaderEpoch.Int16(), 2, 4, (*Handler).handleOffsetForLeaderEpoch)
}

func (h *Handler) handleOffsetForLeaderEpoch(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.OffsetForLeaderEpochRequest)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)

	type job struct {
		rp                 *kmsg.OffsetForLeaderEpochResponseTopicPartition
		ch                 string
		requested, current int32
	}
	var jobs []job
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.OffsetForLeaderEpochResponseTopicPartition, len(t.Partitions))
		resp.Topics = append(resp.Topics, rt)
	}
	x := h.access(ctx, r)
	for ti, t := range req.Topics {
		valid := validTopicName(t.Topic)
		authorized := x.topic(kafkaacl.OpDescribe, t.Topic)
		internal, isInternal := channel.KafkaInternal(t.Topic)
		for pi, p := range t.Partitions {
			rp := &resp.Topics[ti].Partitions[pi]
			*rp = kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition = p.Partition
			rp.LeaderEpoch, rp.EndOffset = -1, -1
			switch {
			case !authorized:
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case !valid, p.Partition < 0, p.Partition >= channel.MaxPartitions, isInternal && p.Partition >= internal.Partitions:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case isInternal:
				// An empty log at epoch 0 forever.
				if rp.ErrorCode = leaderEpochCode(p.CurrentLeaderEpoch); rp.ErrorCode == 0 && p.LeaderEpoch == 0 {
					rp.LeaderEpoch, rp.EndOffset = 0, 0
				}
			case h.router == nil && leaderEpochCode(p.CurrentLeaderEpoch) != 0:
				rp.ErrorCode = leaderEpochCode(p.CurrentLeaderEpoch)
			case p.LeaderEpoch < 0 && h.router == nil:
			default:
				jobs = append(jobs, job{rp: rp, ch: channel.KafkaPartition(t.Topic, p.Partition), requested: p.LeaderEpoch, current: p.CurrentLeaderEpoch})
			}
		}
	}
	forEach(len(jobs), func(i int) {
		j := jobs[i]
		cctx, cancel := context.WithTimeout(ctx, storageCallTimeout)
		defer cancel()
		if h.router != nil {
			h.router.offsetForLeaderEpoch(cctx, j.rp, j.ch, j.requested, j.current)
			return
		}
		out, err := h.storage.GetChannel(cctx, &storagev1.GetChannelRequest{Name: j.ch})
		if err != nil {
			j.rp.ErrorCode = dataCode(err)
			return
		}
		j.rp.LeaderEpoch = 0
		j.rp.EndOffset = out.GetChannel().GetHighWatermark()
	})
	return resp, nil
}
