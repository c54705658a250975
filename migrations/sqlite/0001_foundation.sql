-- Tenants, users, API tokens, jobs with their events, and nodes. Same schema as postgres/0001:
-- uuids are 16-byte blobs, timestamps RFC 3339 text, JSON documents text.

CREATE TABLE tenants (
    id              blob PRIMARY KEY,
    name            text NOT NULL UNIQUE,
    guaranteed_gpus integer NOT NULL DEFAULT 0 CHECK (guaranteed_gpus >= 0),
    max_gpus        integer CHECK (max_gpus >= 0),
    created_at      text NOT NULL
);

CREATE TABLE users (
    id            blob PRIMARY KEY,
    tenant_id     blob NOT NULL REFERENCES tenants (id),
    name          text NOT NULL,
    role          text NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
    cluster_admin integer NOT NULL DEFAULT 0,
    created_at    text NOT NULL,
    UNIQUE (tenant_id, name)
);

CREATE TABLE api_tokens (
    id         blob PRIMARY KEY,
    user_id    blob NOT NULL REFERENCES users (id),
    name       text NOT NULL,
    token_hash blob NOT NULL UNIQUE,
    prefix     text NOT NULL,
    created_at text NOT NULL,
    expires_at text,
    revoked_at text
);
CREATE INDEX api_tokens_user ON api_tokens (user_id);

CREATE TABLE jobs (
    id              blob PRIMARY KEY,
    tenant_id       blob NOT NULL REFERENCES tenants (id),
    name            text NOT NULL,
    job_type        text NOT NULL,
    state           text NOT NULL,
    reason          text NOT NULL,
    message         text NOT NULL,
    priority        integer NOT NULL,
    max_gpus        integer NOT NULL,
    labels          text NOT NULL,
    document        text NOT NULL,
    schema_version  integer NOT NULL,
    submitted_by    blob NOT NULL REFERENCES users (id),
    idempotency_key text,
    request_hash    blob,
    created_at      text NOT NULL,
    updated_at      text NOT NULL,
    UNIQUE (tenant_id, name)
);
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_tenant ON jobs (tenant_id, id);
CREATE INDEX jobs_state ON jobs (state, id);

CREATE TABLE job_events (
    id         integer PRIMARY KEY AUTOINCREMENT,
    job_id     blob NOT NULL REFERENCES jobs (id),
    from_state text,
    to_state   text NOT NULL,
    reason     text NOT NULL,
    message    text NOT NULL,
    actor      blob,
    created_at text NOT NULL
);
CREATE INDEX job_events_job ON job_events (job_id, id);

CREATE TABLE nodes (
    id                blob PRIMARY KEY,
    name              text NOT NULL UNIQUE,
    labels            text NOT NULL,
    gpus              text NOT NULL,
    cpus              integer NOT NULL,
    memory_gb         integer NOT NULL,
    health            text NOT NULL,
    cordoned          integer NOT NULL DEFAULT 0,
    last_heartbeat_at text,
    created_at        text NOT NULL
);
