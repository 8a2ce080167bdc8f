-- +goose Up
-- next_producer_id is the producer id a transactional id moves to when its Prepare*
-- transaction completes (Kafka's TransactionMetadata.nextProducerId): a KIP-890 EndTxn
-- (v5) at an exhausted epoch allocates it, the markers still carry the old producer id,
-- and Complete* switches the row to it at epoch 0. -1 when none.
ALTER TABLE transactions ADD COLUMN next_producer_id bigint NOT NULL DEFAULT -1;

-- +goose Down
ALTER TABLE transactions DROP COLUMN next_producer_id;
