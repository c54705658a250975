-- Hyper-parameter search. An experiment's trials are ordinary jobs; these tables say which point of the
-- space each trial is and which jobs (segments) ran it, so the searcher's state is rebuilt from here.
CREATE TABLE experiments (
    id           uuid PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    name         text NOT NULL,
    state        text NOT NULL,     -- active, paused, succeeded, cancelled, failed
    message      text NOT NULL,
    document     text NOT NULL,     -- the whole DroverExperiment (JSON), defaults filled in
    submitted_by uuid NOT NULL REFERENCES users (id),
    best_trial   integer,
    best_value   double precision,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    ended_at     timestamptz,
    UNIQUE (tenant_id, name)
);
CREATE INDEX experiments_state ON experiments (state, id);

CREATE TABLE experiment_trials (
    experiment_id  uuid NOT NULL REFERENCES experiments (id),
    trial          integer NOT NULL,
    params         text NOT NULL,   -- JSON object: parameter name -> value
    source_trial   integer,         -- started from this trial's checkpoint (PBT's exploit)
    source_segment integer,
    replaces       integer,         -- took this trial's place in a PBT population
    created_at     timestamptz NOT NULL,
    PRIMARY KEY (experiment_id, trial)
);

-- A trial's jobs: segment 0 starts it, later ones resume it (ASHA's promotions, PBT's rounds). The row
-- is written before its job (intent), so a restart finishes creating it instead of creating another.
CREATE TABLE experiment_segments (
    experiment_id uuid NOT NULL,
    trial         integer NOT NULL,
    segment       integer NOT NULL,
    job_id        uuid REFERENCES jobs (id),
    max_steps     bigint,
    stop_reason   text,             -- why the searcher or a budget stopped it
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (experiment_id, trial, segment),
    FOREIGN KEY (experiment_id, trial) REFERENCES experiment_trials (experiment_id, trial)
);
CREATE UNIQUE INDEX experiment_segments_job ON experiment_segments (job_id);

CREATE TABLE experiment_events (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    experiment_id uuid NOT NULL REFERENCES experiments (id),
    message       text NOT NULL,
    created_at    timestamptz NOT NULL
);
CREATE INDEX experiment_events_experiment ON experiment_events (experiment_id, id);
