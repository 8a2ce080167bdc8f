-- +goose Up
-- Pub/Sub schemas (google.pubsub.v1.SchemaService). A schema is its revisions; spec is
-- the serialized google.pubsub.v1.Schema the gateway stored (opaque here). A deleted
-- revision keeps its row as a tombstone (deleted_at set, spec emptied) so a topic's
-- revision range naming it keeps its bound; deleting the schema removes every row.
-- seq orders a schema's revisions by creation (commits to one schema are serialized
-- by its advisory lock, see LOCKS.md).
CREATE TABLE pubsub_schemas (
    id          text        PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pubsub_schema_revisions (
    schema_id   text        NOT NULL REFERENCES pubsub_schemas (id) ON DELETE CASCADE,
    revision_id text        NOT NULL,
    seq         bigserial   NOT NULL,
    spec        bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    deleted_at  timestamptz,
    PRIMARY KEY (schema_id, revision_id)
);
CREATE INDEX pubsub_schema_revisions_order ON pubsub_schema_revisions (schema_id, seq);

-- The schema a topic validates against; NULL when none, and once the schema was
-- deleted (Pub/Sub shows "_deleted-schema_").
ALTER TABLE pubsub_topics ADD COLUMN schema_id text;
CREATE INDEX pubsub_topics_schema ON pubsub_topics (schema_id) WHERE schema_id IS NOT NULL;

-- +goose Down
DROP INDEX pubsub_topics_schema;
ALTER TABLE pubsub_topics DROP COLUMN schema_id;
DROP TABLE pubsub_schema_revisions;
DROP TABLE pubsub_schemas;
