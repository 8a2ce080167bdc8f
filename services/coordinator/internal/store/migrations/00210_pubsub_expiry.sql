-- +goose Up
-- Subscription expiration (google.pubsub.v1.ExpirationPolicy): the TTL the gateway
-- derived from the spec (NULL = never expires) and the last activity the gateways
-- reported (at most once a minute per subscription) or the last create/update.
ALTER TABLE pubsub_subscriptions
    ADD COLUMN expiration_ttl_ms bigint,
    ADD COLUMN last_active_at    timestamptz NOT NULL DEFAULT now();

-- +goose Down
ALTER TABLE pubsub_subscriptions DROP COLUMN expiration_ttl_ms, DROP COLUMN last_active_at;
