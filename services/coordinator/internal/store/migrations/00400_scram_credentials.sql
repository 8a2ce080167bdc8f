-- +goose Up
-- SCRAM credentials of Kafka users (KIP-84, KIP-554): per user and mechanism
-- (SCRAM-SHA-256, SCRAM-SHA-512) the salt, the iteration count and the StoredKey and
-- ServerKey of RFC 5802 §3. No password or salted password is ever stored.
CREATE TABLE scram_credentials (
    user_name   text        NOT NULL,
    mechanism   text        NOT NULL,
    salt        bytea       NOT NULL,
    iterations  integer     NOT NULL,
    stored_key  bytea       NOT NULL,
    server_key  bytea       NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_name, mechanism)
);

-- +goose Down
DROP TABLE scram_credentials;
