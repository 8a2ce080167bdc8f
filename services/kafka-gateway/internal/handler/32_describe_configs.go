package handler

// DescribeConfigs (API key 32), versions 1-4.
//
// Behaviour:
//   - Topic resources (type 2): the coordinator's DescribeTopicConfigs (every known
//     config with value and source; only the asked names when config_names is set).
//     Sources map TOPIC -> DYNAMIC_TOPIC_CONFIG (1), DEFAULT -> DEFAULT_CONFIG (5).
//     Invalid names: INVALID_TOPIC_EXCEPTION; unknown: UNKNOWN_TOPIC_OR_PARTITION.
//   - Broker resources (type 4, name "" or a live node id): a small fixed set of
//     read-only broker configs with their defaults (DEFAULT_CONFIG / STATIC_BROKER_CONFIG).
//     Another name: INVALID_REQUEST.
//   - Group resources (type 32, KIP-848/KIP-932 group configs): the coordinator's
//     DescribeGroupConfigs, one call for all of them: share.auto.offset.reset,
//     share.delivery.count.limit, share.isolation.level, share.record.lock.duration.ms,
//     share.session.timeout.ms, share.heartbeat.interval.ms with GROUP_CONFIG (8) when
//     set on the group, else DEFAULT_CONFIG (the broker's value); the group needs
//     not exist. An empty name: INVALID_REQUEST.
//   - Other resource types (broker loggers, ...): INVALID_REQUEST.
//   - Synonyms (v1+) list the entry itself when asked; documentation (v3+) when asked.
//   - Coordinator outage: REQUEST_TIMED_OUT.
//   - With the authorizer on: DESCRIBE_CONFIGS on the topic (else
//     TOPIC_AUTHORIZATION_FAILED), on the cluster for broker resources (else
//     CLUSTER_AUTHORIZATION_FAILED), on the group for group resources (else
//     GROUP_AUTHORIZATION_FAILED).
//
// KIPs: KIP-133, KIP-226 (synonyms, v1), KIP-569 (types and docs, v3), KIP-482 (v4).

import (
	"context"
	"errors"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.DescribeConfigs.Int16(), 1, 4, (*Handler).handleDescribeConfigs) }

// Kafka ConfigSource and ConfigType values.
const (
	sourceDynamicTopic = kmsg.ConfigSource(1)
	sourceStaticBroker = kmsg.ConfigSource(4)
	sourceDefault      = kmsg.ConfigSource(5)
	configTypeBoolean  = kmsg.ConfigType(1)
	configTypeString   = kmsg.ConfigType(2)
	configTypeInt      = kmsg.ConfigType(3)
	configTypeLong     = kmsg.ConfigType(5)
	configTypeList     = kmsg.ConfigType(7)
)

type brokerConfig struct {
	name, value string
	source      kmsg.ConfigSource
	typ         kmsg.ConfigType
	doc         string
}

// brokerConfigs is the fixed set of broker configs the gateway reports.
func (h *Handler) brokerConfigs() []brokerConfig {
	return []brokerConfig{
		{"auto.create.topics.enable", strconv.FormatBool(h.cfg.AutoCreateTopics), sourceStaticBroker, configTypeBoolean, "Create unknown topics on Metadata and Produce."},
		{"broker.id", strconv.Itoa(int(h.cfg.NodeID)), sourceStaticBroker, configTypeInt, "This kafka-gateway replica's node id."},
		{"default.replication.factor", "1", sourceDefault, configTypeInt, "Replication factor of new topics (storage-core keeps one durable copy)."},
		{"log.cleanup.policy", "delete", sourceDefault, configTypeList, "Default cleanup policy of new topics."},
		{"log.retention.bytes", "-1", sourceDefault, configTypeLong, "Default retention.bytes of new topics."},
		{"log.retention.ms", "604800000", sourceDefault, configTypeLong, "Default retention.ms of new topics."},
		{"log.segment.bytes", "1073741824", sourceDefault, configTypeInt, "Segment size of new topics."},
		{"message.max.bytes", "1048588", sourceDefault, configTypeInt, "Default max.message.bytes of new topics."},
		{"min.insync.replicas", "1", sourceDefault, configTypeInt, "Always 1."},
		{"num.partitions", strconv.Itoa(int(h.cfg.DefaultPartitions)), sourceStaticBroker, configTypeInt, "Partition count of auto-created topics."},
		{"log.message.timestamp.type", "CreateTime", sourceDefault, configTypeString, "Default message.timestamp.type of new topics."},
	}
}

func (h *Handler) handleDescribeConfigs(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)

	resp.Resources = make([]kmsg.DescribeConfigsResponseResource, len(req.Resources))
	var topicIdx, groupIdx []int
	x := h.access(ctx, r)
	for i, res := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		switch {
		case res.ResourceType == resourceTopic && !x.topic(kafkaacl.OpDescribeConfigs, res.ResourceName):
			rr.ErrorCode = kerr.TopicAuthorizationFailed.Code
			resp.Resources[i] = rr
			continue
		case res.ResourceType == resourceBroker && !x.cluster(kafkaacl.OpDescribeConfigs):
			rr.ErrorCode = kerr.ClusterAuthorizationFailed.Code
			resp.Resources[i] = rr
			continue
		case res.ResourceType == resourceGroup && !x.group(kafkaacl.OpDescribeConfigs, res.ResourceName):
			rr.ErrorCode = kerr.GroupAuthorizationFailed.Code
			resp.Resources[i] = rr
			continue
		}
		switch res.ResourceType {
		case resourceTopic:
			if !validTopicName(res.ResourceName) {
				rr.ErrorCode = kerr.InvalidTopicException.Code
				rr.ErrorMessage = errMessage(topicNameError(res.ResourceName))
			} else {
				topicIdx = append(topicIdx, i)
			}
		case resourceBroker:
			if res.ResourceName != "" && !h.isLiveBroker(res.ResourceName) {
				rr.ErrorCode = kerr.InvalidRequest.Code
				rr.ErrorMessage = strPtr("unknown broker " + res.ResourceName)
				break
			}
			want := wanted(res.ConfigNames)
			for _, bc := range h.brokerConfigs() {
				if want != nil && !want[bc.name] {
					continue
				}
				rr.Configs = append(rr.Configs, describeEntry(req, bc.name, bc.value, bc.source, true, false, bc.typ, bc.doc))
			}
		case resourceGroup:
			groupIdx = append(groupIdx, i)
		default:
			rr.ErrorCode = kerr.InvalidRequest.Code
			rr.ErrorMessage = strPtr("only topic, broker and group resources are described")
		}
		resp.Resources[i] = rr
	}
	h.describeGroupConfigs(ctx, req, resp, groupIdx)
	forEach(len(topicIdx), func(k int) {
		i := topicIdx[k]
		res := req.Resources[i]
		rr := &resp.Resources[i]
		cctx, cancel := context.WithTimeout(ctx, coordTimeout)
		defer cancel()
		out, err := h.coord.DescribeTopicConfigs(cctx, &coordinatorv1.DescribeTopicConfigsRequest{Names: []string{res.ResourceName}, ConfigNames: res.ConfigNames})
		if err != nil {
			rr.ErrorCode = controlCode(err)
			rr.ErrorMessage = errMessage(err)
			return
		}
		for _, tc := range out.GetTopics() {
			if tc.GetName() != res.ResourceName {
				continue
			}
			rr.ErrorCode = int16(tc.GetErrorCode())
			rr.ErrorMessage = strPtr(tc.GetErrorMessage())
			for _, e := range tc.GetEntries() {
				src := sourceDefault
				if e.GetSource() == coordinatorv1.ConfigSource_CONFIG_SOURCE_TOPIC {
					src = sourceDynamicTopic
				}
				rr.Configs = append(rr.Configs, describeEntry(req, e.GetName(), e.GetValue(), src, e.GetReadOnly(), e.GetSensitive(), kmsg.ConfigType(e.GetType()), e.GetDocumentation()))
			}
			return
		}
		rr.ErrorCode = kerr.UnknownTopicOrPartition.Code
	})
	return resp, nil
}

// describeGroupConfigs fills the group resources of resp at idx from one
// DescribeGroupConfigs call (REQUEST_TIMED_OUT on each when the coordinator cannot be
// asked).
func (h *Handler) describeGroupConfigs(ctx context.Context, req *kmsg.DescribeConfigsRequest, resp *kmsg.DescribeConfigsResponse, idx []int) {
	if len(idx) == 0 {
		return
	}
	var ids []string
	for _, i := range idx {
		ids = append(ids, req.Resources[i].ResourceName)
	}
	var (
		out *coordinatorv1.DescribeGroupConfigsResponse
		err = errors.New("no coordinator connection")
	)
	if h.shares != nil {
		cctx, cancel := context.WithTimeout(ctx, coordTimeout)
		out, err = h.shares.DescribeGroupConfigs(cctx, &coordinatorv1.DescribeGroupConfigsRequest{GroupIds: ids})
		cancel()
	}
	for k, i := range idx {
		rr := &resp.Resources[i]
		if err != nil || k >= len(out.GetGroups()) {
			rr.ErrorCode, rr.ErrorMessage = kerr.RequestTimedOut.Code, errMessage(err)
			continue
		}
		g := out.GetGroups()[k]
		rr.ErrorCode = int16(g.GetErrorCode())
		rr.ErrorMessage = strPtr(g.GetErrorMessage())
		want := wanted(req.Resources[i].ConfigNames)
		for _, e := range g.GetEntries() {
			if want != nil && !want[e.GetName()] {
				continue
			}
			src := sourceDefault
			if e.GetSource() == coordinatorv1.ConfigSource_CONFIG_SOURCE_GROUP {
				src = kmsg.ConfigSourceGroupConfig
			}
			rr.Configs = append(rr.Configs, describeEntry(req, e.GetName(), e.GetValue(), src, false, false, kmsg.ConfigType(e.GetType()), e.GetDocumentation()))
		}
	}
}

func wanted(names []string) map[string]bool {
	if names == nil {
		return nil
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

func describeEntry(req *kmsg.DescribeConfigsRequest, name, value string, src kmsg.ConfigSource, readOnly, sensitive bool, typ kmsg.ConfigType, doc string) kmsg.DescribeConfigsResponseResourceConfig {
	c := kmsg.NewDescribeConfigsResponseResourceConfig()
	c.Name = name
	if !sensitive {
		v := value
		c.Value = &v
	}
	c.ReadOnly = readOnly
	c.IsDefault = src == sourceDefault
	c.Source = src
	c.IsSensitive = sensitive
	c.ConfigType = typ
	if req.IncludeDocumentation && doc != "" {
		d := doc
		c.Documentation = &d
	}
	if req.IncludeSynonyms {
		s := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
		s.Name, s.Value, s.Source = name, c.Value, src
		c.ConfigSynonyms = append(c.ConfigSynonyms, s)
	}
	return c
}

func (h *Handler) isLiveBroker(name string) bool {
	id, err := strconv.Atoi(name)
	if err != nil {
		return false
	}
	for _, b := range h.liveBrokers("") {
		if int(b.NodeID) == id {
			return true
		}
	}
	return false
}
