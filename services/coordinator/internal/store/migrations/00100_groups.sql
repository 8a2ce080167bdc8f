-- +goose Up
-- consumer_groups is the Kafka classic group coordinator's state, one row per group.
-- Every change to a group (and its members and offsets) happens in a transaction that
-- holds this row's lock (SELECT ... FOR UPDATE), so any coordinator replica can serve any
-- group. A deleted group has no row (Kafka's Dead state).
CREATE TABLE consumer_groups (
    group_id        text        PRIMARY KEY,
    -- Kafka state name: Empty, PreparingRebalance, CompletingRebalance, Stable.
    state           text        NOT NULL,
    generation      integer     NOT NULL DEFAULT 0,
    protocol_type   text        NOT NULL DEFAULT '',
    -- Selected protocol of the current generation ('' while Empty).
    protocol        text        NOT NULL DEFAULT '',
    leader          text        NOT NULL DEFAULT '',
    -- PreparingRebalance: the join phase ends by then (rebalance timeout);
    -- CompletingRebalance: the leader's SyncGroup is due by then. NULL otherwise.
    deadline        timestamptz,
    -- The initial delayed join of an empty group does not end before
    -- (group.initial.rebalance.delay.ms).
    join_not_before timestamptz,
    -- Members of the last completed join phase with the selected protocol's metadata:
    -- the leader's JoinGroup answer. [{"m": member id, "i": instance id, "d": base64}]
    join_members    jsonb       NOT NULL DEFAULT '[]'::jsonb,
    -- When the group last became Empty (KIP-211 offsets retention counts from here).
    empty_since     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX consumer_groups_deadline ON consumer_groups (deadline) WHERE deadline IS NOT NULL;

-- consumer_group_members are the members (and KIP-394 pending members) of a group.
CREATE TABLE consumer_group_members (
    group_id             text        NOT NULL REFERENCES consumer_groups (group_id) ON DELETE CASCADE,
    member_id            text        NOT NULL,
    -- KIP-345 static membership (group.instance.id); NULL for dynamic members.
    group_instance_id    text,
    client_id            text        NOT NULL DEFAULT '',
    client_host          text        NOT NULL DEFAULT '',
    session_timeout_ms   integer     NOT NULL,
    rebalance_timeout_ms integer     NOT NULL,
    protocol_type        text        NOT NULL DEFAULT '',
    -- Supported protocols in preference order, with their metadata (same length).
    protocol_names       text[]      NOT NULL,
    protocol_metadata    bytea[]     NOT NULL,
    assignment           bytea,
    -- Handed out with MEMBER_ID_REQUIRED; no JoinGroup with it yet (KIP-394).
    pending              boolean     NOT NULL DEFAULT false,
    -- Joined in the current join phase, waiting for the answer.
    awaiting_join        boolean     NOT NULL DEFAULT false,
    -- SyncGroup received in the current generation.
    synced               boolean     NOT NULL DEFAULT false,
    -- Generation of the member's last JoinGroup answer.
    generation           integer     NOT NULL DEFAULT 0,
    session_deadline     timestamptz NOT NULL,
    joined_at            timestamptz NOT NULL,
    PRIMARY KEY (group_id, member_id)
);
CREATE UNIQUE INDEX consumer_group_members_instance ON consumer_group_members (group_id, group_instance_id)
    WHERE group_instance_id IS NOT NULL;
CREATE INDEX consumer_group_members_session ON consumer_group_members (session_deadline);

-- consumer_group_offsets are committed offsets (Kafka's __consumer_offsets), written
-- before OffsetCommit is answered.
CREATE TABLE consumer_group_offsets (
    group_id         text        NOT NULL REFERENCES consumer_groups (group_id) ON DELETE CASCADE,
    topic            text        NOT NULL,
    partition        integer     NOT NULL,
    -- Kafka offset of the next record to consume.
    committed_offset bigint      NOT NULL,
    -- -1 when the client did not send one.
    leader_epoch     integer     NOT NULL DEFAULT -1,
    metadata         text        NOT NULL DEFAULT '',
    commit_time      timestamptz NOT NULL,
    PRIMARY KEY (group_id, topic, partition)
);

-- +goose Down
DROP TABLE consumer_group_offsets;
DROP TABLE consumer_group_members;
DROP TABLE consumer_groups;
