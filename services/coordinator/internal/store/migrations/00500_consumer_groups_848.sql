-- +goose Up
-- KIP-848 consumer groups share consumer_groups (one namespace of group ids, one row
-- lock per group, the committed offsets) with the classic groups: group_type says which
-- protocol owns the row. A consumer group's state (members, epochs, target assignment)
-- is one document in consumer_group_848, changed only under the consumer_groups row
-- lock.
ALTER TABLE consumer_groups ADD COLUMN group_type text NOT NULL DEFAULT 'classic';

CREATE TABLE consumer_group_848 (
    group_id      text        PRIMARY KEY REFERENCES consumer_groups (group_id) ON DELETE CASCADE,
    -- internal/consumergroup's group document: group epoch, assignment epoch,
    -- subscribed topic metadata, members with their epochs, assignments and target.
    doc           jsonb       NOT NULL,
    -- The earliest member session or revocation deadline; NULL without members.
    next_deadline timestamptz
);
CREATE INDEX consumer_group_848_deadline ON consumer_group_848 (next_deadline) WHERE next_deadline IS NOT NULL;

-- +goose Down
DROP TABLE consumer_group_848;
ALTER TABLE consumer_groups DROP COLUMN group_type;
