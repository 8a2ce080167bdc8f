-- +goose Up
-- pubsub_snapshots: Pub/Sub snapshots. The acknowledgement state itself is in
-- storage-core (a queue snapshot named by the id); a row exists only once it does.
CREATE TABLE pubsub_snapshots (
    id              text        PRIMARY KEY,
    -- NULL once the subscription was deleted (a snapshot outlives it).
    subscription_id text,
    topic_id        text        NOT NULL,
    spec            bytea       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pubsub_snapshots_topic ON pubsub_snapshots (topic_id, id);

-- +goose Down
DROP TABLE pubsub_snapshots;
