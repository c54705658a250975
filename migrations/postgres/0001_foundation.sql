-- Tenants, users, API tokens, jobs with their events, and nodes.

CREATE TABLE tenants (
    id              uuid PRIMARY KEY,
    name            text NOT NULL UNIQUE,
    guaranteed_gpus integer NOT NULL DEFAULT 0 CHECK (guaranteed_gpus >= 0),
    max_gpus        integer CHECK (max_gpus >= 0),   -- NULL: no limit
    created_at      timestamptz NOT NULL
);

CREATE TABLE users (
    id            uuid PRIMARY KEY,
    tenant_id     uuid NOT NULL REFERENCES tenants (id),
    name          text NOT NULL,
    role          text NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
    cluster_admin boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL,
    UNIQUE (tenant_id, name)
);

CREATE TABLE api_tokens (
    id         uuid PRIMARY KEY,
    user_id    uuid NOT NULL REFERENCES users (id),
    name       text NOT NULL,
    token_hash bytea NOT NULL UNIQUE,   -- SHA-256 of the whole token; the token itself is never stored
    prefix     text NOT NULL,           -- first characters, to tell tokens apart in listings
    created_at timestamptz NOT NULL,
    expires_at timestamptz,
    revoked_at timestamptz
);
CREATE INDEX api_tokens_user ON api_tokens (user_id);

CREATE TABLE jobs (
    id              uuid PRIMARY KEY,   -- UUIDv7: ordering by id is ordering by submission
    tenant_id       uuid NOT NULL REFERENCES tenants (id),
    name            text NOT NULL,
    job_type        text NOT NULL,
    state           text NOT NULL,
    reason          text NOT NULL,
    message         text NOT NULL,
    priority        integer NOT NULL,
    max_gpus        bigint NOT NULL,
    labels          jsonb NOT NULL,
    document        jsonb NOT NULL,     -- the whole DroverJob, defaults filled in
    schema_version  integer NOT NULL,
    submitted_by    uuid NOT NULL REFERENCES users (id),
    idempotency_key text,
    request_hash    bytea,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    UNIQUE (tenant_id, name)
);
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_tenant ON jobs (tenant_id, id);
CREATE INDEX jobs_state ON jobs (state, id);
CREATE INDEX jobs_labels ON jobs USING gin (labels jsonb_path_ops);

CREATE TABLE job_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     uuid NOT NULL REFERENCES jobs (id),
    from_state text,                  -- NULL for the submission
    to_state   text NOT NULL,
    reason     text NOT NULL,
    message    text NOT NULL,
    actor      uuid,                  -- the user, when a user caused it
    created_at timestamptz NOT NULL
);
CREATE INDEX job_events_job ON job_events (job_id, id);

CREATE TABLE nodes (
    id                uuid PRIMARY KEY,
    name              text NOT NULL UNIQUE,
    labels            jsonb NOT NULL,
    gpus              jsonb NOT NULL,  -- [{index, model, memory_gb}]
    cpus              integer NOT NULL,
    memory_gb         integer NOT NULL,
    health            text NOT NULL,
    cordoned          boolean NOT NULL DEFAULT false,
    last_heartbeat_at timestamptz,
    created_at        timestamptz NOT NULL
);
