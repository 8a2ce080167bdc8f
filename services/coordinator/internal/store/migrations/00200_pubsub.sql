-- +goose Up
-- The Pub/Sub registry. Resource ids are global (the project segment of a resource
-- name is validated by the gateway and ignored). spec is the serialized
-- google.pubsub.v1 message the gateway stored; the coordinator does not decode it.
-- A topic row exists only once its log channel gcp.<id> exists, a subscription row only
-- once its queue gcp.sub.<id> exists. Changes to one id are serialized with transaction
-- advisory locks (see LOCKS.md).
CREATE TABLE pubsub_topics (
    id          text        PRIMARY KEY,
    spec        bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pubsub_subscriptions (
    id          text        PRIMARY KEY,
    -- NULL once the topic was deleted (Pub/Sub shows "_deleted-topic_").
    topic_id    text,
    spec        bytea       NOT NULL,
    detached    boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pubsub_subscriptions_topic ON pubsub_subscriptions (topic_id, id);

-- +goose Down
DROP TABLE pubsub_subscriptions;
DROP TABLE pubsub_topics;
