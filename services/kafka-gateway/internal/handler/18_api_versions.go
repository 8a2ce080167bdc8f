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
// is registered (KIP-848 consumer groups, as Kafka 4 finalizes it), and share.version,
// supported 0..1 and finalized at 1 exactly when share groups are served
// (ShareGroupHeartbeat registered and group.share.enable on; Kafka 4.2 finalizes
// share.version 1). With group.share.enable off the share group APIs (shareGroupKeys)
// are left out of the list.
//
// From v3 the client names its software (KIP-511). A name or version that is not
// letters and digits, with '.' and '-' allowed inside, is answered with INVALID_REQUEST
// (42) and no API keys, as Kafka's ApiVersionsRequest.isValid does; the connection stays
// open.
//
// KIPs: KIP-35, KIP-482 (flexible v3), KIP-511 (client software name/version, v3),
// KIP-584 (features), KIP-890, KIP-848, KIP-932.

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { register(kmsg.ApiVersions.Int16(), 0, 4, (*Handler).handleAPIVersions) }

func (h *Handler) handleAPIVersions(_ context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.ApiVersionsRequest)
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	if req.Version >= 3 && !(validSoftwareName(req.ClientSoftwareName) && validSoftwareName(req.ClientSoftwareVersion)) {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	resp.ApiKeys = h.APIKeys()
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
		if h.serves(kmsg.ShareGroupHeartbeat.Int16()) {
			sf := kmsg.NewApiVersionsResponseSupportedFeature()
			sf.Name, sf.MinVersion, sf.MaxVersion = shareVersionFeature, 0, shareVersion
			resp.SupportedFeatures = append(resp.SupportedFeatures, sf)
			ff := kmsg.NewApiVersionsResponseFinalizedFeature()
			ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = shareVersionFeature, shareVersion, shareVersion
			resp.FinalizedFeatures = append(resp.FinalizedFeatures, ff)
		}
		resp.FinalizedFeaturesEpoch = 1
	}
	return resp, nil
}

// validSoftwareName reports whether s is a valid KIP-511 client software name or
// version: non-empty ASCII letters and digits, with '.' and '-' allowed except first and
// last (Kafka's pattern [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?).
func validSoftwareName(s string) bool {
	if s == "" {
		return false
	}
	alnum := func(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }
	for i := 0; i < len(s); i++ {
		c := s[i]
		if alnum(c) || (c == '.' || c == '-') && i != 0 && i != len(s)-1 {
			continue
		}
		return false
	}
	return true
}

// The share.version feature (KIP-932): 1 is share groups.
const (
	shareVersionFeature = "share.version"
	shareVersion        = 1
)

// shareGroupKeys are the KIP-932 APIs group.share.enable turns on and off.
var shareGroupKeys = []int16{
	kmsg.ShareGroupHeartbeat.Int16(), kmsg.ShareGroupDescribe.Int16(), kmsg.ShareFetch.Int16(), kmsg.ShareAcknowledge.Int16(),
	kmsg.DescribeShareGroupOffsets.Int16(), kmsg.AlterShareGroupOffsets.Int16(), kmsg.DeleteShareGroupOffsets.Int16(),
}

// serves reports whether key is registered and on (share group APIs are off with
// group.share.enable off).
func (h *Handler) serves(key int16) bool {
	if _, _, ok := Supported(key); !ok {
		return false
	}
	return !h.cfg.DisableShareGroups || !slices.Contains(shareGroupKeys, key)
}

// APIKeys returns the API keys this handler serves and their version ranges, sorted by
// key: every registered key but the share group ones when they are off.
func (h *Handler) APIKeys() []kmsg.ApiVersionsResponseApiKey {
	out := APIKeys()
	if h.cfg.DisableShareGroups {
		out = slices.DeleteFunc(out, func(k kmsg.ApiVersionsResponseApiKey) bool { return slices.Contains(shareGroupKeys, k.ApiKey) })
	}
	return out
}

// UnsupportedAPIVersions is the answer to an ApiVersions request above our maximum
// version: v0, UNSUPPORTED_VERSION (35), and the ranges served so the client can pick
// one.
func (h *Handler) UnsupportedAPIVersions() *kmsg.ApiVersionsResponse {
	resp := UnsupportedAPIVersions()
	resp.ApiKeys = h.APIKeys()
	return resp
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

// APIKeys returns every registered API key and its version range, sorted by key.
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
// version: v0, UNSUPPORTED_VERSION (35), and every registered range (Handler's
// UnsupportedAPIVersions lists only those it serves).
func UnsupportedAPIVersions() *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	resp.ApiKeys = APIKeys()
	return resp
}
