-- The executor gateway's certificate authority (issue #56): the first replica to start makes it and
-- every replica signs with it (executors' client certificates at enrolment and renewal, each
-- replica's own gateway certificate). The private key is sealed with the server key, as the
-- cluster's own secret.
CREATE TABLE gateway_authority (
    id          integer PRIMARY KEY CHECK (id = 1),
    certificate text NOT NULL,      -- PEM
    key_id      text NOT NULL,      -- which server key sealed the private key
    nonce       bytea NOT NULL,
    ciphertext  bytea NOT NULL,
    created_at  timestamptz NOT NULL
);
