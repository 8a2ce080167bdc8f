package handler

// SaslAuthenticate (API key 36), versions 0-2.
//
// Behaviour: carries one message of the mechanism chosen by SaslHandshake v1 and
// answers the server's. A failed exchange (bad credentials, unknown user, malformed
// message, a SCRAM client-final whose nonce is not the one the server sent) is
// SASL_AUTHENTICATION_FAILED with a message, and the connection is closed after the
// answer. Without a preceding SaslHandshake v1, or off a SASL listener, the answer is
// ILLEGAL_SASL_STATE (closing the connection on a SASL listener). On success v1+
// carries session_lifetime_ms (KIP-368): connections.max.reauth.ms, shortened to the
// credential's expiry (an OAUTHBEARER token's exp), which bounds it also when
// connections.max.reauth.ms is 0 (off); 0 when neither applies. A connection past its
// lifetime that has not re-authenticated is closed at its next request. v2 is flexible.
//
// KIPs: KIP-152, KIP-368, KIP-482 (flexible v2).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { register(kmsg.SASLAuthenticate.Int16(), 0, 2, (*Handler).handleSaslAuthenticate) }

func (h *Handler) handleSaslAuthenticate(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.SASLAuthenticateRequest)
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if r.Session == nil {
		resp.ErrorCode = errIllegalSaslState
		resp.ErrorMessage = strPtr("SASL is not enabled on this listener")
		return resp, nil
	}
	out, lifetime, code, msg := r.Session.step(ctx, req.SASLAuthBytes, h.cfg.ConnectionsMaxReauth, false)
	resp.ErrorCode = code
	if msg != "" {
		resp.ErrorMessage = strPtr(msg)
	}
	resp.SASLAuthBytes = out
	if resp.SASLAuthBytes == nil {
		resp.SASLAuthBytes = []byte{}
	}
	resp.SessionLifetimeMillis = lifetime.Milliseconds()
	return resp, nil
}
