package handler

// IncrementalAlterConfigs (API key 44), versions 0-1.
//
// Behaviour: topic resources go to the coordinator's AlterTopicConfigs in one call
// (op = Kafka op + 1: SET, DELETE, APPEND, SUBTRACT; the coordinator validates names and
// values: INVALID_CONFIG, and pushes storage-relevant ones to the channels). Before
// that, per resource as Kafka's ConfigAdminManager does (checks shared with
// AlterConfigs, configalter.go): a resource given twice, a config named twice, or a SET,
// APPEND or SUBTRACT with a null value is INVALID_REQUEST; broker configs are read-only
// here (INVALID_REQUEST); group resources (type 32) go to the coordinator's
// AlterGroupConfigs (SET and DELETE of share.auto.offset.reset, share.isolation.level,
// share.record.lock.duration.ms 15000..60000, share.delivery.count.limit 2..10,
// share.session.timeout.ms 45000..60000, share.heartbeat.interval.ms 5000..15000; unknown
// names, bad values, APPEND and SUBTRACT INVALID_CONFIG; an empty name INVALID_REQUEST;
// ALTER_CONFIGS on the group, else GROUP_AUTHORIZATION_FAILED); other resource types
// INVALID_REQUEST; an empty topic name
// INVALID_REQUEST, an invalid one INVALID_TOPIC_EXCEPTION, one of Kafka's internal
// topics POLICY_VIOLATION (their configs are fixed). validate_only is passed
// through. Altered topics leave the metadata cache at once. Coordinator outage:
// REQUEST_TIMED_OUT.
//
// With the authorizer on: ALTER_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED),
// on the cluster for broker resources (else CLUSTER_AUTHORIZATION_FAILED).
//
// KIPs: KIP-339, KIP-482 (flexible v1).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() {
	register(kmsg.IncrementalAlterConfigs.Int16(), 0, 1, (*Handler).handleIncrementalAlterConfigs)
}

func (h *Handler) handleIncrementalAlterConfigs(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)

	rs := make([]configResource, len(req.Resources))
	for i, res := range req.Resources {
		rs[i] = configResource{typ: res.ResourceType, name: res.ResourceName}
		for _, c := range res.Configs {
			rs[i].configs = append(rs[i].configs, c.Name)
			if c.Value == nil && c.Op != kmsg.IncrementalAlterConfigOpDelete {
				rs[i].nulls = append(rs[i].nulls, c.Name)
			}
			ca := &coordinatorv1.ConfigAlteration{Name: c.Name, Op: coordinatorv1.AlterOp(int32(c.Op) + 1)}
			if c.Op < 0 || c.Op > 3 {
				ca.Op = coordinatorv1.AlterOp_ALTER_OP_UNSPECIFIED
			}
			if c.Value != nil {
				ca.Value = *c.Value
			}
			rs[i].alterations = append(rs[i].alterations, ca)
		}
	}
	codes, msgs := h.alterConfigs(ctx, h.access(ctx, r), rs, req.ValidateOnly, false)
	for i, res := range req.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		rr.ErrorCode, rr.ErrorMessage = codes[i], msgs[i]
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}
