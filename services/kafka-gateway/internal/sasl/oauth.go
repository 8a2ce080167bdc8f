package sasl

// OAUTHBEARER (RFC 7628, KIP-255): the client sends one message, a GS2 header followed
// by \x01-separated key=value pairs, one of them "auth=Bearer <token>". A valid token
// authenticates its subject; an invalid one is answered, as RFC 7628 §3.2.2 and
// Kafka's OAuthBearerSaslServer do, with a JSON error challenge
// ({"status":"invalid_token"}) that the client acknowledges with a lone \x01, and then
// fails. Two validators: Unsecured, Kafka's OAuthBearerUnsecuredValidator (alg "none"
// tokens, for tests and development only), and JWKS, which checks the signature
// against an issuer's JSON Web Key Set, the expiry, the issuer and the audience
// (Kafka's broker-side JWT validator, KIP-768).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Token is what a validator learned from a bearer token.
type Token struct {
	// Subject is the principal's name (the sub claim, or the configured claim).
	Subject string
	// Expiry is the exp claim.
	Expiry time.Time
}

// TokenValidator checks a bearer token. An error means the token is refused.
type TokenValidator interface {
	Validate(ctx context.Context, token string) (Token, error)
}

// OAuthBearer is the OAUTHBEARER mechanism over a validator.
type OAuthBearer struct{ v TokenValidator }

// NewOAuthBearer returns OAUTHBEARER checking tokens with v.
func NewOAuthBearer(v TokenValidator) *OAuthBearer { return &OAuthBearer{v: v} }

// Name implements Mechanism.
func (o *OAuthBearer) Name() string { return MechOAuthBearer }

// Start implements Mechanism.
func (o *OAuthBearer) Start() Exchange { return &oauthExchange{o: o} }

type oauthExchange struct {
	o      *OAuthBearer
	tok    Token
	reason string // set once the error challenge was sent
	done   bool
}

// invalidToken is the error challenge of RFC 7628 §3.2.2.
var invalidToken = []byte(`{"status":"invalid_token"}`)

func (e *oauthExchange) Step(ctx context.Context, in []byte) ([]byte, bool, error) {
	if e.done {
		return nil, false, failed("OAUTHBEARER exchange already complete")
	}
	if e.reason != "" {
		// The client's acknowledgement of the error challenge (\x01): fail now.
		e.done = true
		return nil, false, failed("OAUTHBEARER: %s", e.reason)
	}
	authz, token, err := parseOAuthMessage(in)
	if err != nil {
		e.done = true
		return nil, false, failed("OAUTHBEARER: %v", err)
	}
	t, err := e.o.v.Validate(ctx, token)
	if err == nil && authz != "" && authz != t.Subject {
		err = fmt.Errorf("authorization id %q differs from the token's subject", authz)
	}
	if err != nil {
		e.reason = err.Error()
		return invalidToken, false, nil
	}
	e.tok, e.done = t, true
	return nil, true, nil
}

func (e *oauthExchange) Principal() string { return Principal(e.tok.Subject) }
func (e *oauthExchange) Expiry() time.Time { return e.tok.Expiry }

// parseOAuthMessage reads the client's initial response (RFC 7628 §3.1):
// gs2-header \x01 *(key=value \x01) \x01, with auth=Bearer <token> among the pairs.
func parseOAuthMessage(in []byte) (authz, token string, err error) {
	msg := string(in)
	gs2, rest, ok := strings.Cut(msg, "\x01")
	if !ok || !strings.HasSuffix(rest, "\x01") {
		return "", "", errors.New("malformed client message")
	}
	parts := strings.Split(gs2, ",")
	if len(parts) != 3 || (parts[0] != "n" && parts[0] != "y") || parts[2] != "" {
		return "", "", errors.New("malformed GS2 header")
	}
	if parts[1] != "" {
		if !strings.HasPrefix(parts[1], "a=") {
			return "", "", errors.New("malformed authorization id")
		}
		authz = parts[1][2:]
	}
	for _, kv := range strings.Split(strings.TrimSuffix(rest, "\x01"), "\x01") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			if kv == "" {
				continue
			}
			return "", "", errors.New("malformed key/value pair")
		}
		if k == "auth" {
			scheme, tok, ok := strings.Cut(v, " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
				return "", "", errors.New("auth is not a bearer token")
			}
			token = strings.TrimSpace(tok)
		}
	}
	if token == "" {
		return "", "", errors.New("no auth=Bearer token")
	}
	return authz, token, nil
}

// claimsFrom reads the subject (claim subClaim) and exp of a JSON claims set.
func claimsFrom(payload []byte, subClaim string, now time.Time, skew time.Duration) (Token, error) {
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		return Token{}, errors.New("claims are not a JSON object")
	}
	sub, _ := claims[subClaim].(string)
	if strings.TrimSpace(sub) == "" {
		return Token{}, fmt.Errorf("no %q claim", subClaim)
	}
	exp, ok := claims["exp"].(float64)
	if !ok || math.IsNaN(exp) || math.IsInf(exp, 0) {
		return Token{}, errors.New("no exp claim")
	}
	expiry := time.UnixMilli(int64(exp * 1000))
	if !now.Before(expiry.Add(skew)) {
		return Token{}, errors.New("token expired")
	}
	return Token{Subject: sub, Expiry: expiry}, nil
}

// Unsecured accepts unsigned tokens (JWS with alg "none"), as Kafka's
// OAuthBearerUnsecuredValidatorCallbackHandler does: for tests and development only,
// anyone can forge one. The token must carry a subject and an exp in the future.
type Unsecured struct {
	// SubClaim names the subject claim ("" = "sub").
	SubClaim string
	// Now is the clock (nil = time.Now).
	Now func() time.Time
}

// Validate implements TokenValidator.
func (u Unsecured) Validate(_ context.Context, token string) (Token, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[2] != "" {
		return Token{}, errors.New("not an unsecured JWS (header.payload.)")
	}
	hdr, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[0], "="))
	if err != nil {
		return Token{}, errors.New("header is not base64url")
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal(hdr, &h); err != nil || h.Alg != "none" {
		return Token{}, errors.New(`header alg is not "none"`)
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return Token{}, errors.New("payload is not base64url")
	}
	sub := u.SubClaim
	if sub == "" {
		sub = "sub"
	}
	now := time.Now
	if u.Now != nil {
		now = u.Now
	}
	return claimsFrom(payload, sub, now(), 0)
}
