package handler

// CreateTopics (API key 19), versions 2-7.
//
// Behaviour:
//   - Names are validated here (INVALID_TOPIC_EXCEPTION) and by the coordinator, which
//     decides partition counts (1..256, else INVALID_PARTITIONS) and configs
//     (INVALID_CONFIG; a config with a null value is INVALID_CONFIG here, as in Kafka's
//     ReplicationControlManager). num_partitions -1 means the gateway's default
//     partition count.
//   - Replication factor -1 or 1 is accepted (storage-core keeps one durable copy); any
//     other is INVALID_REPLICATION_FACTOR. Manual replica assignments are
//     INVALID_REQUEST. A name given twice in one request is INVALID_REQUEST for both.
//   - Kafka's internal topics (channel.KafkaInternalTopics) exist already:
//     TOPIC_ALREADY_EXISTS. __cluster_metadata (KRaft's metadata log) is INVALID_REQUEST,
//     "Creation of internal topic __cluster_metadata is prohibited.", as in Kafka.
//   - validate_only is passed through. The created topic is put in the metadata cache
//     at once, so a Produce right after CreateTopics finds it.
//   - v5+ answers carry the partition count, replication factor 1 and the topic's
//     configs; v7+ the topic id. Coordinator outage: REQUEST_TIMED_OUT (retriable).
//
// With the authorizer on: CREATE on the cluster or the topic, else
// TOPIC_AUTHORIZATION_FAILED; the configs of a created topic are returned only with
// DESCRIBE_CONFIGS on it (else its config error code is TOPIC_AUTHORIZATION_FAILED).
//
// KIPs: KIP-108 (validate only), KIP-464 (defaults, v4), KIP-482 (flexible v5+),
// KIP-525 (configs in response, v5), KIP-516 (topic id, v7).

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/kafkaacl"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.CreateTopics.Int16(), 2, 7, (*Handler).handleCreateTopics) }

// clusterMetadataTopic is KRaft's metadata log (Kafka's Topic.CLUSTER_METADATA_TOPIC_NAME),
// which Kafka's ControllerApis.createTopics refuses to create (INVALID_REQUEST).
const clusterMetadataTopic = "__cluster_metadata"

func (h *Handler) handleCreateTopics(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)

	count := map[string]int{}
	for _, t := range req.Topics {
		count[t.Topic]++
	}
	creq := &coordinatorv1.CreateTopicsRequest{ValidateOnly: req.ValidateOnly}
	idx := map[string]int{}
	x := h.access(ctx, r)
	for _, t := range req.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		rt.NumPartitions, rt.ReplicationFactor = -1, -1
		switch {
		case count[t.Topic] > 1:
			rt.ErrorCode = kerr.InvalidRequest.Code
			rt.ErrorMessage = strPtr("topic named more than once in the request")
		case t.Topic == clusterMetadataTopic:
			rt.ErrorCode = kerr.InvalidRequest.Code
			rt.ErrorMessage = strPtr("Creation of internal topic " + clusterMetadataTopic + " is prohibited.")
		case !x.mayCreate(t.Topic):
			rt.ErrorCode = kerr.TopicAuthorizationFailed.Code
			rt.ErrorMessage = strPtr("Authorization failed.")
		case !validTopicName(t.Topic):
			rt.ErrorCode = kerr.InvalidTopicException.Code
			rt.ErrorMessage = errMessage(topicNameError(t.Topic))
		case h.internalTopic(t.Topic, [16]byte{}) != nil:
			rt.ErrorCode = kerr.TopicAlreadyExists.Code
			rt.ErrorMessage = strPtr("Topic '" + t.Topic + "' already exists.")
		case t.ReplicationFactor != -1 && t.ReplicationFactor != 1:
			rt.ErrorCode = kerr.InvalidReplicationFactor.Code
			rt.ErrorMessage = strPtr("replication factor must be 1 or -1: storage-core keeps one durable copy")
		case len(t.ReplicaAssignment) > 0:
			rt.ErrorCode = kerr.InvalidRequest.Code
			rt.ErrorMessage = strPtr("manual replica assignment is not supported")
		case len(nullConfigs(t.Configs)) > 0:
			rt.ErrorCode = kerr.InvalidConfig.Code
			rt.ErrorMessage = strPtr("Null value not supported for topic configs: " + strings.Join(nullConfigs(t.Configs), ","))
		default:
			n := t.NumPartitions
			if n == -1 {
				n = h.cfg.DefaultPartitions
			}
			ct := &coordinatorv1.CreatableTopic{Name: t.Topic, Partitions: n, Configs: map[string]string{}}
			for _, c := range t.Configs {
				ct.Configs[c.Name] = *c.Value
			}
			creq.Topics = append(creq.Topics, ct)
			idx[t.Topic] = len(resp.Topics)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(creq.Topics) == 0 {
		return resp, nil
	}
	gen := h.topics.generation()
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.coord.CreateTopics(cctx, creq)
	if err != nil {
		code := controlCode(err)
		h.log.Warn("coordinator CreateTopics failed", zap.Int("topics", len(creq.Topics)), zap.Error(err))
		for _, i := range idx {
			resp.Topics[i].ErrorCode = code
			resp.Topics[i].ErrorMessage = errMessage(err)
		}
		return resp, nil
	}
	for _, res := range out.GetResults() {
		i, ok := idx[res.GetName()]
		if !ok {
			continue
		}
		rt := &resp.Topics[i]
		rt.ErrorCode = int16(res.GetErrorCode())
		rt.ErrorMessage = strPtr(res.GetErrorMessage())
		if rt.ErrorCode != 0 {
			continue
		}
		rt.ReplicationFactor = 1
		for _, ct := range creq.Topics {
			if ct.Name == res.GetName() {
				rt.NumPartitions = ct.Partitions
			}
		}
		if t := res.GetTopic(); t != nil {
			ti := topicFromProto(t)
			if ti.Name == "" {
				ti.Name = res.GetName()
			}
			rt.TopicID = ti.ID
			rt.NumPartitions = ti.Partitions
			if !x.topic(kafkaacl.OpDescribeConfigs, ti.Name) {
				rt.ConfigErrorCode = kerr.TopicAuthorizationFailed.Code
				continue
			}
			for k, v := range ti.Configs {
				c := kmsg.NewCreateTopicsResponseTopicConfig()
				c.Name, c.Value, c.Source = k, &v, 1 // DYNAMIC_TOPIC_CONFIG
				rt.Configs = append(rt.Configs, c)
			}
			if !req.ValidateOnly {
				h.topics.put(gen, ti)
			}
		}
	}
	return resp, nil
}

// nullConfigs names the configs of a CreateTopics topic whose value is null.
func nullConfigs(cs []kmsg.CreateTopicsRequestTopicConfig) []string {
	var out []string
	for _, c := range cs {
		if c.Value == nil {
			out = append(out, c.Name)
		}
	}
	return out
}
