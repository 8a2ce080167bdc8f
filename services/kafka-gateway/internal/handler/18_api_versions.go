package handler

// ApiVersions (API key 18), versions 0-4.
//
// The answer lists exactly the API keys and version ranges registered by the files of
// this package. A request above our maximum version is answered by the server with a
// v0-encoded response carrying UNSUPPORTED_VERSION (35) and these ranges (KIP-511), never
// a disconnect. The response header is always v0, even for the flexible v3+ body (the
// server takes care of that). v3+ advertises the features served:
// transaction.version, supported 0..2 and finalized at 2 (KIP-890 transactions v2:
// Produce v12 adds partitions implicitly, TxnOffsetCommit v5 adds the group, EndTxn v5
// bumps the epoch per transaction; clients that ignore it use transactions v1), and
// group.version, supported 0..1 and finalized at 1 exactly when ConsumerGroupHeartbeat
// is registered (KIP-848 consumer groups, as Kafka 4 finalizes it).
//
// KIPs: KIP-35, KIP-482 (flexible v3), KIP-511 (client software name/version, v3),
// KIP-584 (features), KIP-890, KIP-848.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { register(kmsg.ApiVersions.Int16(), 0, 4, (*Handler).handleAPIVersions) }

func (h *Handler) handleAPIVersions(_ context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.ApiVersionsRequest)
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = APIKeys()
	if req.Version >= 3 {
		sf := kmsg.NewApiVersionsResponseSupportedFeature()
		sf.Name, sf.MinVersion, sf.MaxVersion = transactionVersionFeature, 0, transactionVersion
		resp.SupportedFeatures = append(resp.SupportedFeatures, sf)
		ff := kmsg.NewApiVersionsResponseFinalizedFeature()
		ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = transactionVersionFeature, transactionVersion, transactionVersion
		resp.FinalizedFeatures = append(resp.FinalizedFeatures, ff)
		if _, _, ok := Supported(kmsg.ConsumerGroupHeartbeat.Int16()); ok {
			sf := kmsg.NewApiVersionsResponseSupportedFeature()
			sf.Name, sf.MinVersion, sf.MaxVersion = groupVersionFeature, 0, groupVersion
			resp.SupportedFeatures = append(resp.SupportedFeatures, sf)
			ff := kmsg.NewApiVersionsResponseFinalizedFeature()
			ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = groupVersionFeature, groupVersion, groupVersion
			resp.FinalizedFeatures = append(resp.FinalizedFeatures, ff)
		}
		resp.FinalizedFeaturesEpoch = 1
	}
	return resp, nil
}

// The transaction.version feature (KIP-890): 2 is served (Produce v12, TxnOffsetCommit
// v5 and EndTxn v5 registered with their v2 behaviour).
const (
	transactionVersionFeature = "transaction.version"
	transactionVersion        = 2
)

// The group.version feature (KIP-848): 1 is the consumer group protocol.
const (
	groupVersionFeature = "group.version"
	groupVersion        = 1
)

// APIKeys returns the registered API keys and version ranges, sorted by key.
func APIKeys() []kmsg.ApiVersionsResponseApiKey {
	var out []kmsg.ApiVersionsResponseApiKey
	for _, a := range apis() {
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = a.key, a.min, a.max
		out = append(out, k)
	}
	return out
}

// UnsupportedAPIVersions is the answer to an ApiVersions request above our maximum
// version: v0, UNSUPPORTED_VERSION (35), and our ranges so the client can pick one.
func UnsupportedAPIVersions() *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	resp.ApiKeys = APIKeys()
	return resp
}
