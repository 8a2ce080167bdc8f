package handler

// What AlterConfigs (33) and IncrementalAlterConfigs (44) share: the per-resource checks
// Kafka's broker makes before a change reaches the controller (ConfigAdminManager.preprocess,
// ControllerConfigurationValidator), and the one coordinator call that validates and
// applies the topic changes (values are checked by the coordinator's topicconfig table,
// for both APIs alike).

import (
	"context"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// configResource is one resource of an AlterConfigs or IncrementalAlterConfigs request,
// reduced to what the checks need.
type configResource struct {
	typ  kmsg.ConfigResourceType
	name string
	// configs are the config names in request order.
	configs []string
	// nulls are the configs whose null value is refused (AlterConfigs: every null;
	// IncrementalAlterConfigs: a null with an op other than DELETE).
	nulls []string
	// alterations are the changes sent to the coordinator when the checks pass.
	alterations []*coordinatorv1.ConfigAlteration
}

// resourceKey identifies a config resource for Kafka's "at most once" rule.
type resourceKey struct {
	typ  kmsg.ConfigResourceType
	name string
}

// checkAlterResources applies Kafka's per-resource checks, in Kafka's order, and returns
// per resource the error code (0 when the resource may go to the coordinator) and
// message:
//   - a (type, name) pair given twice: INVALID_REQUEST on each;
//   - a config named twice: INVALID_REQUEST;
//   - with the authorizer on, no ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED)
//     or, for a broker resource, on the cluster (CLUSTER_AUTHORIZATION_FAILED);
//   - a refused null value: INVALID_REQUEST naming the configs;
//   - a broker resource: INVALID_REQUEST (broker configs are read-only here);
//   - a group resource (only when groups is set: IncrementalAlterConfigs) without
//     ALTER_CONFIGS on the group: GROUP_AUTHORIZATION_FAILED; otherwise it passes (the
//     coordinator checks names and values);
//   - another non-topic type: INVALID_REQUEST;
//   - an empty topic name (Kafka's default topic resource): INVALID_REQUEST;
//   - an invalid topic name: INVALID_TOPIC_EXCEPTION;
//   - one of Kafka's internal topics (channel.KafkaInternalTopics): POLICY_VIOLATION,
//     validate_only or not. Kafka 4's controller would apply the change; ours hold no
//     log for a config to act on, and their configs are the fixed ones DescribeConfigs
//     shows. __cluster_metadata is no topic: the coordinator answers
//     UNKNOWN_TOPIC_OR_PARTITION, as Kafka's controller does.
func checkAlterResources(x *access, rs []configResource, groups bool) ([]int16, []*string) {
	count := make(map[resourceKey]int, len(rs))
	for _, r := range rs {
		count[resourceKey{r.typ, r.name}]++
	}
	codes, msgs := make([]int16, len(rs)), make([]*string, len(rs))
	for i, r := range rs {
		var msg string
		switch {
		case count[resourceKey{r.typ, r.name}] > 1:
			msg = "Each resource must appear at most once."
		case hasDuplicate(r.configs):
			msg = "Error due to duplicate config keys"
		case r.typ == resourceTopic && !x.topic(kafkaacl.OpAlterConfigs, r.name):
			codes[i] = kerr.TopicAuthorizationFailed.Code
			continue
		case r.typ == resourceBroker && !x.cluster(kafkaacl.OpAlterConfigs):
			codes[i] = kerr.ClusterAuthorizationFailed.Code
			continue
		case len(r.nulls) > 0:
			msg = "Null value not supported for : " + strings.Join(r.nulls, ", ")
		case r.typ == resourceBroker:
			msg = "broker configs are read-only"
		case groups && r.typ == resourceGroup && !x.group(kafkaacl.OpAlterConfigs, r.name):
			codes[i] = kerr.GroupAuthorizationFailed.Code
			continue
		case groups && r.typ == resourceGroup:
			continue
		case r.typ != resourceTopic:
			msg = "Unknown resource type " + strconv.Itoa(int(r.typ)) + "; only topic configs can be altered"
		case r.name == "":
			msg = "Default topic resources are not allowed."
		case !validTopicName(r.name):
			codes[i] = kerr.InvalidTopicException.Code
			continue
		case isInternalTopic(r.name):
			codes[i], msgs[i] = kerr.PolicyViolation.Code, strPtr("The configs of internal topic "+r.name+" are fixed.")
			continue
		default:
			continue
		}
		codes[i], msgs[i] = kerr.InvalidRequest.Code, &msg
	}
	return codes, msgs
}

func hasDuplicate(names []string) bool {
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			return true
		}
		seen[n] = true
	}
	return false
}

// alterConfigs is the common path of AlterConfigs and IncrementalAlterConfigs: it
// applies checkAlterResources to rs, sends the topic resources that pass to the
// coordinator in one AlterTopicConfigs call (validateOnly and replace as given) and,
// IncrementalAlterConfigs only (not replace), the group resources in one
// AlterGroupConfigs call, and returns per resource of rs the final error code (0 for
// success) and message.
func (h *Handler) alterConfigs(ctx context.Context, x *access, rs []configResource, validateOnly, replace bool) ([]int16, []*string) {
	codes, msgs := checkAlterResources(x, rs, !replace)
	areq := &coordinatorv1.AlterTopicConfigsRequest{ValidateOnly: validateOnly, Replace: replace}
	greq := &coordinatorv1.AlterGroupConfigsRequest{ValidateOnly: validateOnly}
	idx, gidx := map[string]int{}, map[string]int{}
	for i, r := range rs {
		switch {
		case codes[i] != 0:
		case r.typ == resourceGroup:
			greq.Groups = append(greq.Groups, &coordinatorv1.GroupAlteration{GroupId: r.name, Alterations: r.alterations})
			gidx[r.name] = i
		default:
			areq.Topics = append(areq.Topics, &coordinatorv1.TopicAlteration{Name: r.name, Alterations: r.alterations})
			idx[r.name] = i
		}
	}
	if len(greq.Groups) > 0 {
		h.alterGroupConfigs(ctx, greq, gidx, func(i int, code int16, msg *string) { codes[i], msgs[i] = code, msg })
	}
	h.alterTopicConfigs(ctx, areq, func(name string, code int16, msg *string) {
		if i, ok := idx[name]; ok {
			codes[i], msgs[i] = code, msg
		}
	})
	return codes, msgs
}

// alterTopicConfigs sends areq (one TopicAlteration per topic, at most once each) to the
// coordinator and reports each topic's outcome through set(name, code, message). The
// topics leave the metadata cache at once. A coordinator outage is REQUEST_TIMED_OUT (or
// the code controlCode gives) on every topic.
func (h *Handler) alterTopicConfigs(ctx context.Context, areq *coordinatorv1.AlterTopicConfigsRequest, set func(name string, code int16, msg *string)) {
	if len(areq.GetTopics()) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.coord.AlterTopicConfigs(cctx, areq)
	for _, t := range areq.GetTopics() {
		h.topics.invalidate(t.GetName())
	}
	if err != nil {
		code := controlCode(err)
		h.log.Warn("coordinator AlterTopicConfigs failed", zap.Error(err))
		for _, t := range areq.GetTopics() {
			set(t.GetName(), code, errMessage(err))
		}
		return
	}
	for _, res := range out.GetResults() {
		set(res.GetName(), int16(res.GetErrorCode()), strPtr(res.GetErrorMessage()))
	}
}

// alterGroupConfigs sends greq to the coordinator's share group service and reports
// each group's outcome through set(index in rs, code, message); gidx maps group ids to
// those indexes. No coordinator connection, or an outage: REQUEST_TIMED_OUT (or the
// code controlCode gives) on every group.
func (h *Handler) alterGroupConfigs(ctx context.Context, greq *coordinatorv1.AlterGroupConfigsRequest, gidx map[string]int, set func(i int, code int16, msg *string)) {
	if h.shares == nil {
		for _, g := range greq.GetGroups() {
			set(gidx[g.GetGroupId()], kerr.RequestTimedOut.Code, nil)
		}
		return
	}
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.shares.AlterGroupConfigs(cctx, greq)
	if err != nil {
		code := controlCode(err)
		h.log.Warn("coordinator AlterGroupConfigs failed", zap.Error(err))
		for _, g := range greq.GetGroups() {
			set(gidx[g.GetGroupId()], code, errMessage(err))
		}
		return
	}
	for _, r := range out.GetResults() {
		if i, ok := gidx[r.GetGroupId()]; ok {
			set(i, int16(r.GetErrorCode()), strPtr(r.GetErrorMessage()))
		}
	}
}

func isInternalTopic(name string) bool {
	_, ok := channel.KafkaInternal(name)
	return ok
}
