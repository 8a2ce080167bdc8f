-- +goose Up
-- Logins of the mqtt-bridge listener (MqttUserService): the password's hash (bcrypt or
-- an argon2id PHC string, made by the coordinator; never the password) and the topic
-- rules, MQTT filters the user may publish to and subscribe within (NULL: every
-- topic; an empty array: none).
CREATE TABLE mqtt_users (
    user_name      text        PRIMARY KEY,
    password_hash  text        NOT NULL,
    publish        text[],
    subscribe      text[],
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE mqtt_users;
