-- +goose Up
-- Kafka group configs (ConfigResource type GROUP, KIP-848/KIP-932 GroupConfig): the
-- overrides set on a group id through IncrementalAlterConfigs. A group needs not exist
-- for its configs to be set (as in Kafka); DeleteGroups removes them with the group.
CREATE TABLE group_configs (
    group_id text NOT NULL,
    name     text NOT NULL,
    value    text NOT NULL,
    PRIMARY KEY (group_id, name)
);

-- +goose Down
DROP TABLE group_configs;
