package handler

// AlterConfigs (API key 33), versions 0-2.
//
// Behaviour: the older, non-incremental config change (Kafka's "legacy" AlterConfigs,
// still sent by kadm's AlterTopicConfigsState, Sarama's ClusterAdmin.AlterConfig and
// older kafka-configs.sh). The configs given for a topic become its whole set of dynamic
// configs: one not named returns to its default. Topic resources go to the coordinator's
// AlterTopicConfigs in one call with replace set, every config as a SET, so names and
// values are validated as for IncrementalAlterConfigs (unknown name or bad value:
// INVALID_CONFIG) and nothing of a refused topic changes. validate_only validates and
// changes nothing. Before that, per resource as Kafka's ConfigAdminManager does: a
// resource given twice, a config named twice or a null value is INVALID_REQUEST; broker
// configs are read-only (INVALID_REQUEST), other resource types INVALID_REQUEST; an
// empty topic name INVALID_REQUEST, an invalid one INVALID_TOPIC_EXCEPTION, one of
// Kafka's internal topics POLICY_VIOLATION (their configs are fixed), an unknown one
// UNKNOWN_TOPIC_OR_PARTITION. Altered topics leave the metadata cache at once.
// Coordinator outage: REQUEST_TIMED_OUT.
//
// With the authorizer on: ALTER_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED),
// on the cluster for broker resources (else CLUSTER_AUTHORIZATION_FAILED).
//
// KIPs: KIP-133 (the API), KIP-482 (flexible v2). Kafka deprecates it for
// IncrementalAlterConfigs (KIP-339) but still serves v0-2.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() {
	register(kmsg.AlterConfigs.Int16(), 0, 2, (*Handler).handleAlterConfigs)
}

func (h *Handler) handleAlterConfigs(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.AlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)

	rs := make([]configResource, len(req.Resources))
	for i, res := range req.Resources {
		rs[i] = configResource{typ: res.ResourceType, name: res.ResourceName}
		for _, c := range res.Configs {
			rs[i].configs = append(rs[i].configs, c.Name)
			if c.Value == nil {
				// Refused by the checks: never sent.
				rs[i].nulls = append(rs[i].nulls, c.Name)
				continue
			}
			rs[i].alterations = append(rs[i].alterations, &coordinatorv1.ConfigAlteration{Name: c.Name, Op: coordinatorv1.AlterOp_ALTER_OP_SET, Value: *c.Value})
		}
	}
	codes, msgs := h.alterConfigs(ctx, h.access(ctx, r), rs, req.ValidateOnly, true)
	for i, res := range req.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		rr.ErrorCode, rr.ErrorMessage = codes[i], msgs[i]
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}
