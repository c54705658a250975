-- Trust: executor enrolment (one-time enrolment tokens and the per-node credentials executors receive
-- in exchange, both stored as SHA-256 hashes only) and tenant secrets sealed with the server key.

CREATE TABLE enrollment_tokens (
    id         blob PRIMARY KEY,
    name       text NOT NULL,
    token_hash blob NOT NULL UNIQUE,
    prefix     text NOT NULL,
    uses_left  integer NOT NULL CHECK (uses_left >= 0),
    node_name  text,                  -- the one node it may enrol, when minted for one
    created_by blob REFERENCES users (id),
    created_at text NOT NULL,
    expires_at text,
    revoked_at text
);

CREATE TABLE node_credentials (
    id              blob PRIMARY KEY,
    node_name       text NOT NULL,
    credential_hash blob NOT NULL UNIQUE,
    prefix          text NOT NULL,
    enrolled_with   text NOT NULL,      -- the enrolment token's name, or `server` for the configured one
    created_at      text NOT NULL,
    revoked_at      text
);
-- One live credential per node name: a second executor cannot enrol as a node that already has one.
-- A name whose credential was revoked enrols again only with a token minted for that name.
CREATE UNIQUE INDEX node_credentials_live ON node_credentials (node_name) WHERE revoked_at IS NULL;

-- Tenant secrets: sealed with the server's key (ChaCha20-Poly1305, the tenant and name bound as
-- associated data), opened only to hand a value to a task's process.
CREATE TABLE secrets (
    tenant_id  blob NOT NULL REFERENCES tenants (id),
    name       text NOT NULL,
    key_id     text NOT NULL,      -- which server key sealed it (a digest of the key, not the key)
    nonce      blob NOT NULL,
    ciphertext blob NOT NULL,
    created_by blob REFERENCES users (id),
    created_at text NOT NULL,
    updated_at text NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

-- The submission ceiling counts each tenant's waiting jobs.
CREATE INDEX jobs_tenant_state ON jobs (tenant_id, state);

-- The audit log: every privileged action (who, what, on what, when), for cluster administrators.
CREATE TABLE audit_events (
    id        integer PRIMARY KEY AUTOINCREMENT,
    at        text NOT NULL,
    actor_id  blob,                -- the user; none for an executor's enrolment
    actor     text NOT NULL,     -- the user's name, or `node:NAME`
    tenant_id blob,                -- the actor's tenant
    action    text NOT NULL,     -- `token.create`, `node.revoke`, ...
    target    text NOT NULL,     -- what it acted on
    detail    text NOT NULL DEFAULT ''
);

-- Several server replicas (Postgres): the one holding the advisory lock leads (runs the scheduling
-- loop and the executor gateway's sessions) and says where executors reach it; the others redirect.
CREATE TABLE cluster_leader (
    id       integer PRIMARY KEY CHECK (id = 1),
    holder   text NOT NULL,      -- the replica: host name and process id
    gateway  text NOT NULL,      -- where executors reach its gateway
    since    text NOT NULL
);

-- A user's request that a running job checkpoint now, kept until the leader has passed it on.
ALTER TABLE jobs ADD COLUMN checkpoint_requested_at text;
