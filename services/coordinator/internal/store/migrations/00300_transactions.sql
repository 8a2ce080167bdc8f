-- +goose Up
-- transactions is the Kafka transaction coordinator's state (Kafka's __transaction_state),
-- one row per transactional id. Every change happens in a transaction that holds this
-- row's lock (SELECT ... FOR UPDATE), so any coordinator replica serves any id.
CREATE TABLE transactions (
    transactional_id    text        PRIMARY KEY,
    producer_id         bigint      NOT NULL,
    producer_epoch      integer     NOT NULL,
    -- The id and epoch before the last InitProducerId bump, so a retried InitProducerId
    -- (KIP-360) is recognised; -1 when none.
    last_producer_id    bigint      NOT NULL DEFAULT -1,
    last_producer_epoch integer     NOT NULL DEFAULT -1,
    -- Kafka state name: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
    -- CompleteAbort, Dead.
    state               text        NOT NULL,
    -- transaction.timeout.ms of the producer's InitProducerId.
    timeout_ms          integer     NOT NULL,
    -- When the current transaction became Ongoing; NULL when none is open.
    started_at          timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now()
);
-- The sweep looks for open transactions (timeouts) and unfinished decisions.
CREATE INDEX transactions_open ON transactions (state, started_at)
    WHERE state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort');

-- transaction_partitions are the partitions of a transaction's current (Ongoing or
-- Prepare*) transaction: each gets a marker at its end.
CREATE TABLE transaction_partitions (
    transactional_id text    NOT NULL REFERENCES transactions (transactional_id) ON DELETE CASCADE,
    topic            text    NOT NULL,
    partition        integer NOT NULL,
    PRIMARY KEY (transactional_id, topic, partition)
);

-- transaction_groups are the consumer groups added with AddOffsetsToTxn.
CREATE TABLE transaction_groups (
    transactional_id text NOT NULL REFERENCES transactions (transactional_id) ON DELETE CASCADE,
    group_id         text NOT NULL,
    PRIMARY KEY (transactional_id, group_id)
);

-- transaction_offsets are offsets staged by TxnOffsetCommit: copied into
-- consumer_group_offsets when the transaction commits, dropped when it aborts. While a
-- row exists, OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for it.
CREATE TABLE transaction_offsets (
    transactional_id text        NOT NULL REFERENCES transactions (transactional_id) ON DELETE CASCADE,
    group_id         text        NOT NULL,
    topic            text        NOT NULL,
    partition        integer     NOT NULL,
    committed_offset bigint      NOT NULL,
    leader_epoch     integer     NOT NULL DEFAULT -1,
    metadata         text        NOT NULL DEFAULT '',
    commit_time      timestamptz NOT NULL,
    PRIMARY KEY (transactional_id, group_id, topic, partition)
);
CREATE INDEX transaction_offsets_group ON transaction_offsets (group_id, topic, partition);

-- +goose Down
DROP TABLE transaction_offsets;
DROP TABLE transaction_groups;
DROP TABLE transaction_partitions;
DROP TABLE transactions;
