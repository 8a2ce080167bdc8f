package handler

// DeleteRecords (API key 21), versions 0-2.
//
// Behaviour: per partition, storage-core DeleteRecords moves the log start to the given
// offset (before_sequence = offset + 1); offset -1 means the high watermark (delete
// everything). The answer's low watermark is the new log start offset. As in Kafka the
// log start only moves forward: an offset below it is no error and changes nothing (the
// low watermark is the current log start). An offset past the high watermark or below
// -1 is OFFSET_OUT_OF_RANGE; unknown partitions UNKNOWN_TOPIC_OR_PARTITION; storage
// outage NOT_LEADER_OR_FOLLOWER (retriable). A partition of one of Kafka's internal
// topics (channel.KafkaInternalTopics) is INVALID_TOPIC_EXCEPTION, as Kafka's
// ReplicaManager refuses to delete records there.
//
// With the authorizer on: DELETE on each topic, else TOPIC_AUTHORIZATION_FAILED.
//
// KIPs: KIP-107, KIP-482 (flexible v2).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/kafkaacl"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func init() { register(kmsg.DeleteRecords.Int16(), 0, 2, (*Handler).handleDeleteRecords) }

func (h *Handler) handleDeleteRecords(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DeleteRecordsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)

	type job struct {
		rp     *kmsg.DeleteRecordsResponseTopicPartition
		ch     string
		before int64
	}
	var jobs []job
	for _, t := range req.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.DeleteRecordsResponseTopicPartition, len(t.Partitions))
		resp.Topics = append(resp.Topics, rt)
	}
	x := h.access(ctx, r)
	for ti, t := range req.Topics {
		valid := validTopicName(t.Topic)
		authorized := x.topic(kafkaacl.OpDelete, t.Topic)
		internal, isInternal := channel.KafkaInternal(t.Topic)
		for pi, p := range t.Partitions {
			rp := &resp.Topics[ti].Partitions[pi]
			*rp = kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition = p.Partition
			rp.LowWatermark = -1
			switch {
			case !authorized:
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case !valid, p.Partition < 0, p.Partition >= channel.MaxPartitions, isInternal && p.Partition >= internal.Partitions:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case isInternal:
				rp.ErrorCode = kerr.InvalidTopicException.Code // Kafka: "Cannot delete records of internal topic"
			case p.Offset < -1:
				rp.ErrorCode = kerr.OffsetOutOfRange.Code
			default:
				before := int64(-1)
				if p.Offset >= 0 {
					before = channel.OffsetToSequence(p.Offset)
				}
				jobs = append(jobs, job{rp: rp, ch: channel.KafkaPartition(t.Topic, p.Partition), before: before})
			}
		}
	}
	forEach(len(jobs), func(i int) {
		j := jobs[i]
		cctx, cancel := context.WithTimeout(ctx, storageCallTimeout)
		defer cancel()
		out, err := h.storage.DeleteRecords(cctx, &storagev1.DeleteRecordsRequest{Channel: j.ch, BeforeSequence: j.before})
		if err != nil {
			j.rp.ErrorCode = dataCode(err)
			if j.rp.ErrorCode == kerr.InvalidRequest.Code {
				j.rp.ErrorCode = kerr.OffsetOutOfRange.Code
			}
			return
		}
		j.rp.LowWatermark = channel.SequenceToOffset(out.GetLogStartSequence())
	})
	return resp, nil
}
