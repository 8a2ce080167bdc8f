package handler

// ApiVersions (API key 18), versions 0-4.
//
// The answer lists exactly the API keys and version ranges registered by the files of
// this package. A request above our maximum version is answered by the server with a
// v0-encoded response carrying UNSUPPORTED_VERSION (35) and these ranges (KIP-511), never
// a disconnect. The response header is always v0, even for the flexible v3+ body (the
// server takes care of that). No features are advertised (v3+ tagged fields empty).
//
// KIPs: KIP-35, KIP-482 (flexible v3), KIP-511 (client software name/version, v3).

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
	return resp, nil
}

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
