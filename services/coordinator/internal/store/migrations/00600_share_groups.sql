-- +goose Up
-- KIP-932 share groups share consumer_groups with the classic and consumer groups (one
-- namespace of group ids, one row lock per group): group_type 'share', protocol_type
-- 'share'. A share group's membership (members, epochs, target assignment) is one
-- document in share_group_932, changed only under the consumer_groups row lock. Its
-- records' delivery state is storage-core's, not here.
CREATE TABLE share_group_932 (
    group_id      text        PRIMARY KEY REFERENCES consumer_groups (group_id) ON DELETE CASCADE,
    -- internal/consumergroup's share group document: group epoch, assignment epoch,
    -- subscribed topic metadata, members with their epochs and assignments.
    doc           jsonb       NOT NULL,
    -- The earliest member session deadline; NULL without members.
    next_deadline timestamptz
);
CREATE INDEX share_group_932_deadline ON share_group_932 (next_deadline) WHERE next_deadline IS NOT NULL;

-- +goose Down
DROP TABLE share_group_932;
