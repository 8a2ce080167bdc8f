-- +goose Up
-- Kafka ACL bindings (KIP-11, prefixed patterns KIP-290), Kafka's numeric codes as
-- libs/kafkaacl defines them: resource_type 2..7, pattern_type 3 LITERAL / 4 PREFIXED,
-- operation 2..14, permission_type 2 DENY / 3 ALLOW. A binding is stored once.
CREATE TABLE kafka_acls (
    resource_type   smallint NOT NULL,
    resource_name   text     NOT NULL,
    pattern_type    smallint NOT NULL,
    principal       text     NOT NULL,
    host            text     NOT NULL,
    operation       smallint NOT NULL,
    permission_type smallint NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_type, pattern_type, resource_name, principal, host, operation, permission_type)
);

-- +goose Down
DROP TABLE kafka_acls;
