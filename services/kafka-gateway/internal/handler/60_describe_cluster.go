package handler

// DescribeCluster (API key 60), versions 0-2.
//
// Behaviour: the live kafka-gateway replicas (as in Metadata), the controller (lowest
// node id) and the derived cluster id. Endpoint type (v1+, KIP-919): brokers (1) are
// served; controllers (2) are UNSUPPORTED_ENDPOINT_TYPE, as a Kafka broker answers.
// No broker is ever fenced (v2). Authorized operations are not computed.
//
// With the authorizer on, as Kafka's AuthHelper.computeDescribeClusterResponse: the
// brokers are answered to every principal, and the cluster's authorized operations
// (KIP-430), when asked, are those allowed with DESCRIBE on the cluster, else 0 (with
// the authorizer off they stay INT32_MIN, "not provided").
//
// KIPs: KIP-700, KIP-919 (v1), KIP-1073 (v2).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { register(kmsg.DescribeCluster.Int16(), 0, 2, (*Handler).handleDescribeCluster) }

func (h *Handler) handleDescribeCluster(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DescribeClusterRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.EndpointType = req.EndpointType
	if req.Version >= 1 && req.EndpointType != 1 {
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		resp.ErrorMessage = strPtr("only broker endpoints are served")
		return resp, nil
	}
	if x := h.access(ctx, r); req.IncludeClusterAuthorizedOperations && x != nil {
		resp.ClusterAuthorizedOperations = x.clusterOperations()
	}
	brokers := h.liveBrokers(r.Listener)
	resp.ClusterID = h.kafkaID
	resp.ControllerID = brokers[0].NodeID
	for _, b := range brokers {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port, rb.Rack = b.NodeID, b.Host, b.Port, b.Rack
		resp.Brokers = append(resp.Brokers, rb)
	}
	return resp, nil
}
