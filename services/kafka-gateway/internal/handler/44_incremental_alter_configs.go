package handler

// IncrementalAlterConfigs (API key 44), versions 0-1.
//
// Behaviour: topic resources go to the coordinator's AlterTopicConfigs in one call
// (op = Kafka op + 1: SET, DELETE, APPEND, SUBTRACT; the coordinator validates names and
// values: INVALID_CONFIG, and pushes storage-relevant ones to the channels). Invalid
// topic names: INVALID_TOPIC_EXCEPTION; a topic named twice, or a SET, APPEND or
// SUBTRACT with a null value: INVALID_REQUEST (as Kafka's ConfigAdminManager). Broker
// configs are read-only here: INVALID_REQUEST. validate_only is passed through. Altered
// topics leave the metadata cache at once. Coordinator outage: REQUEST_TIMED_OUT.
//
// KIPs: KIP-339, KIP-482 (flexible v1).

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() {
	register(kmsg.IncrementalAlterConfigs.Int16(), 0, 1, (*Handler).handleIncrementalAlterConfigs)
}

func (h *Handler) handleIncrementalAlterConfigs(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)

	count := map[string]int{}
	for _, res := range req.Resources {
		if res.ResourceType == resourceTopic {
			count[res.ResourceName]++
		}
	}
	areq := &coordinatorv1.AlterTopicConfigsRequest{ValidateOnly: req.ValidateOnly}
	idx := map[string]int{}
	for _, res := range req.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		switch {
		case res.ResourceType == resourceBroker:
			rr.ErrorCode = kerr.InvalidRequest.Code
			rr.ErrorMessage = strPtr("broker configs are read-only")
		case res.ResourceType != resourceTopic:
			rr.ErrorCode = kerr.InvalidRequest.Code
			rr.ErrorMessage = strPtr("only topic configs can be altered")
		case count[res.ResourceName] > 1:
			rr.ErrorCode = kerr.InvalidRequest.Code
			rr.ErrorMessage = strPtr("topic named more than once in the request")
		case len(nullValued(res.Configs)) > 0:
			rr.ErrorCode = kerr.InvalidRequest.Code
			rr.ErrorMessage = strPtr("Null value not supported for : " + strings.Join(nullValued(res.Configs), ", "))
		case !validTopicName(res.ResourceName):
			rr.ErrorCode = kerr.InvalidTopicException.Code
		default:
			ta := &coordinatorv1.TopicAlteration{Name: res.ResourceName}
			for _, c := range res.Configs {
				ca := &coordinatorv1.ConfigAlteration{Name: c.Name, Op: coordinatorv1.AlterOp(int32(c.Op) + 1)}
				if c.Op < 0 || c.Op > 3 {
					ca.Op = coordinatorv1.AlterOp_ALTER_OP_UNSPECIFIED
				}
				if c.Value != nil {
					ca.Value = *c.Value
				}
				ta.Alterations = append(ta.Alterations, ca)
			}
			areq.Topics = append(areq.Topics, ta)
			idx[res.ResourceName] = len(resp.Resources)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	if len(areq.Topics) == 0 {
		return resp, nil
	}
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.coord.AlterTopicConfigs(cctx, areq)
	for n := range idx {
		h.topics.invalidate(n)
	}
	if err != nil {
		code := controlCode(err)
		h.log.Warn("coordinator AlterTopicConfigs failed", zap.Error(err))
		for _, i := range idx {
			resp.Resources[i].ErrorCode = code
			resp.Resources[i].ErrorMessage = errMessage(err)
		}
		return resp, nil
	}
	for _, res := range out.GetResults() {
		if i, ok := idx[res.GetName()]; ok {
			resp.Resources[i].ErrorCode = int16(res.GetErrorCode())
			resp.Resources[i].ErrorMessage = strPtr(res.GetErrorMessage())
		}
	}
	return resp, nil
}

// nullValued names the configs of res that carry a null value with an op other than
// DELETE (Kafka refuses those with INVALID_REQUEST before looking at the resource).
func nullValued(cs []kmsg.IncrementalAlterConfigsRequestResourceConfig) []string {
	var out []string
	for _, c := range cs {
		if c.Value == nil && c.Op != kmsg.IncrementalAlterConfigOpDelete {
			out = append(out, c.Name)
		}
	}
	return out
}
