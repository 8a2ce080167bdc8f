package handler

// SaslHandshake (API key 17), versions 0-1.
//
// Behaviour: on a SASL_PLAINTEXT or SASL_SSL listener, chooses the connection's SASL
// mechanism and lists the enabled ones (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512,
// OAUTHBEARER as configured). A mechanism that is not enabled is
// UNSUPPORTED_SASL_MECHANISM and the connection is closed after the answer. v0 (KIP-43)
// is followed by bare SASL tokens (size-prefixed, no Kafka header); v1 (KIP-152) by
// SaslAuthenticate requests. On an authenticated connection a v1 handshake with the
// original mechanism starts a re-authentication (KIP-368), during which any request but
// its SaslAuthenticate (and ApiVersions) closes the connection; anything else out of
// order is ILLEGAL_SASL_STATE and closes the connection. Off a SASL listener the answer is
// ILLEGAL_SASL_STATE and the connection stays open, as Kafka's KafkaApis answers.
//
// KIPs: KIP-43, KIP-152, KIP-368.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { register(kmsg.SASLHandshake.Int16(), 0, 1, (*Handler).handleSaslHandshake) }

func (h *Handler) handleSaslHandshake(_ context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.SASLHandshakeRequest)
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = h.saslAuth.Mechanisms()
	if resp.SupportedMechanisms == nil {
		resp.SupportedMechanisms = []string{}
	}
	if r.Session == nil {
		resp.ErrorCode = errIllegalSaslState
		return resp, nil
	}
	resp.ErrorCode, _ = r.Session.handshake(h.saslAuth, req.Mechanism, req.Version)
	return resp, nil
}
