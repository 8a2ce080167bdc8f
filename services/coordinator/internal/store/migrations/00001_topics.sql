-- +goose Up
-- topics is the Kafka topic registry. A row exists only once every partition's
-- storage-core channel exists (the coordinator creates channels first), so a visible
-- topic is always usable for Produce.
CREATE TABLE topics (
    name        text        PRIMARY KEY,
    topic_id    uuid        NOT NULL UNIQUE,
    partitions  integer     NOT NULL CHECK (partitions BETWEEN 1 AND 256),
    -- Explicitly set topic configs only (name -> value); defaults live in code.
    configs     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- producer_id_blocks hands out blocks of Kafka producer ids. Each nextval is the first
-- id of a fresh block (the block size is the increment). Sequences are never rolled
-- back, so an id is never handed out twice, across restarts and replicas.
CREATE SEQUENCE producer_id_blocks AS bigint INCREMENT BY 1000 MINVALUE 0 START WITH 0;

-- +goose Down
DROP SEQUENCE producer_id_blocks;
DROP TABLE topics;
