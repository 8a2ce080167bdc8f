package handler

// DescribeProducers (API key 61), version 0.
//
// Behaviour: per partition, the producers storage-core keeps state for on the
// partition's log (one storage-core DescribeProducers call for the request): producer
// id and epoch, last sequence, last append time, coordinator epoch of its last marker,
// and the offset of its open transaction's first record (-1 when none). Partitions of
// unknown topics, or beyond the topic's partition count, are UNKNOWN_TOPIC_OR_PARTITION;
// a storage outage NOT_LEADER_OR_FOLLOWER (retriable).
//
// With the authorizer on: READ on each topic, else TOPIC_AUTHORIZATION_FAILED.
//
// KIPs: KIP-664.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/kafkaacl"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func init() { register(kmsg.DescribeProducers.Int16(), 0, 0, (*Handler).handleDescribeProducers) }

func (h *Handler) handleDescribeProducers(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DescribeProducersRequest)
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	names := make([]string, 0, len(req.Topics))
	x := h.access(ctx, r)
	for _, t := range req.Topics {
		if validTopicName(t.Topic) && x.topic(kafkaacl.OpRead, t.Topic) {
			names = append(names, t.Topic)
		}
	}
	infos, _, coordErr := h.resolveTopics(ctx, names, false, nil)
	type slot struct{ t, p int }
	var (
		channels []string
		at       []slot
	)
	for ti, t := range req.Topics {
		rt := kmsg.NewDescribeProducersResponseTopic()
		rt.Topic = t.Topic
		info := infos[t.Topic]
		for _, p := range t.Partitions {
			rp := kmsg.NewDescribeProducersResponseTopicPartition()
			rp.Partition = p
			if !x.topic(kafkaacl.OpRead, t.Topic) {
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			} else if unknownPartition(t.Topic, p, info, coordErr) {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			} else {
				// Known, or the coordinator is down: storage-core decides.
				channels = append(channels, channel.KafkaPartition(t.Topic, p))
				at = append(at, slot{ti, len(rt.Partitions)})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(channels) == 0 {
		return resp, nil
	}
	cctx, cancel := context.WithTimeout(ctx, storageCallTimeout)
	defer cancel()
	out, err := h.storage.DescribeProducers(cctx, &storagev1.DescribeProducersRequest{Channels: channels})
	results := out.GetResults()
	for i, s := range at {
		rp := &resp.Topics[s.t].Partitions[s.p]
		if code, failed := batchFailCode(err, i, len(results)); failed {
			rp.ErrorCode = code
			continue
		}
		res := results[i]
		if res.GetError() != storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED {
			rp.ErrorCode = storageCode(res.GetError())
			if msg := res.GetErrorMessage(); msg != "" {
				rp.ErrorMessage = &msg
			}
			continue
		}
		for _, ps := range res.GetProducers() {
			ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
			ap.ProducerID, ap.ProducerEpoch, ap.LastSequence = ps.GetProducerId(), ps.GetProducerEpoch(), ps.GetLastSequence()
			ap.LastTimestamp, ap.CoordinatorEpoch = ps.GetLastTimestampMs(), ps.GetCoordinatorEpoch()
			ap.CurrentTxnStartOffset = -1
			if seq := ps.GetCurrentTxnStartSequence(); seq > 0 {
				ap.CurrentTxnStartOffset = seq - 1
			}
			rp.ActiveProducers = append(rp.ActiveProducers, ap)
		}
	}
	return resp, nil
}
