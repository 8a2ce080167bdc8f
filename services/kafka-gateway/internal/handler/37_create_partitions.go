package handler

// CreatePartitions (API key 37), versions 0-3.
//
// Behaviour: the coordinator grows topics to the new total count (partitions only grow,
// 1..256: INVALID_PARTITIONS otherwise; unknown topic: UNKNOWN_TOPIC_OR_PARTITION).
// Manual assignments are INVALID_REQUEST; a topic named twice is INVALID_REQUEST;
// validate_only is passed through. Grown topics leave the metadata cache at once.
// Coordinator outage: REQUEST_TIMED_OUT.
//
// Kafka's internal topics (channel.KafkaInternalTopics) keep their partition count:
// INVALID_PARTITIONS, for a count at or below it with the messages of Kafka 4's
// ReplicationControlManager.createPartitions ("Topic already has 50 partition(s).",
// "... would not be an increase."); a larger count, which Kafka's controller would
// apply, is INVALID_PARTITIONS too, since a consumer group's or transactional id's
// place is fixed by that count. __cluster_metadata is no topic:
// UNKNOWN_TOPIC_OR_PARTITION, as in Kafka.
//
// With the authorizer on (Kafka 4's ControllerApis.createPartitions): ALTER on the
// cluster allows every topic, else each needs ALTER on it, otherwise
// TOPIC_AUTHORIZATION_FAILED.
//
// KIPs: KIP-195, KIP-482 (flexible v2+).

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.CreatePartitions.Int16(), 0, 3, (*Handler).handleCreatePartitions) }

func (h *Handler) handleCreatePartitions(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.CreatePartitionsRequest)
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)

	count := map[string]int{}
	for _, t := range req.Topics {
		count[t.Topic]++
	}
	creq := &coordinatorv1.CreatePartitionsRequest{ValidateOnly: req.ValidateOnly}
	idx := map[string]int{}
	x := h.access(ctx, r)
	all := x.cluster(kafkaacl.OpAlter)
	for _, t := range req.Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		fixed := internalPartitions(t.Topic, t.Count)
		switch {
		case count[t.Topic] > 1:
			rt.ErrorCode = kerr.InvalidRequest.Code
			rt.ErrorMessage = strPtr("topic named more than once in the request")
		case !all && !x.topic(kafkaacl.OpAlter, t.Topic):
			rt.ErrorCode = kerr.TopicAuthorizationFailed.Code
		case !validTopicName(t.Topic):
			rt.ErrorCode = kerr.InvalidTopicException.Code
		case fixed != "":
			rt.ErrorCode = kerr.InvalidPartitions.Code
			rt.ErrorMessage = &fixed
		case len(t.Assignment) > 0:
			rt.ErrorCode = kerr.InvalidRequest.Code
			rt.ErrorMessage = strPtr("manual partition assignment is not supported")
		default:
			creq.Topics = append(creq.Topics, &coordinatorv1.PartitionGrowth{Name: t.Topic, Count: t.Count})
			idx[t.Topic] = len(resp.Topics)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(creq.Topics) == 0 {
		return resp, nil
	}
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.coord.CreatePartitions(cctx, creq)
	for n := range idx {
		h.topics.invalidate(n)
	}
	if err != nil {
		code := controlCode(err)
		h.log.Warn("coordinator CreatePartitions failed", zap.Error(err))
		for _, i := range idx {
			resp.Topics[i].ErrorCode = code
			resp.Topics[i].ErrorMessage = errMessage(err)
		}
		return resp, nil
	}
	for _, res := range out.GetResults() {
		if i, ok := idx[res.GetName()]; ok {
			resp.Topics[i].ErrorCode = int16(res.GetErrorCode())
			resp.Topics[i].ErrorMessage = strPtr(res.GetErrorMessage())
		}
	}
	return resp, nil
}

// internalPartitions returns why topic, when it is one of Kafka's internal topics, may
// not have count partitions ("" when it is no internal topic).
func internalPartitions(topic string, count int32) string {
	it, ok := channel.KafkaInternal(topic)
	switch {
	case !ok:
		return ""
	case count == it.Partitions:
		return "Topic already has " + strconv.Itoa(int(it.Partitions)) + " partition(s)."
	case count < it.Partitions:
		return "The topic " + topic + " currently has " + strconv.Itoa(int(it.Partitions)) + " partition(s); " +
			strconv.Itoa(int(count)) + " would not be an increase."
	}
	return "The partition count of internal topic " + topic + " is fixed at " + strconv.Itoa(int(it.Partitions)) + "."
}
