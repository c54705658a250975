-- Running jobs on executors: generations, tasks, metric samples, checkpoints and task logs.

ALTER TABLE jobs ADD COLUMN generation bigint NOT NULL DEFAULT 0;   -- of the job's current allocation
ALTER TABLE jobs ADD COLUMN restarts integer NOT NULL DEFAULT 0;    -- restarts after failures so far

ALTER TABLE nodes ADD COLUMN draining boolean NOT NULL DEFAULT false;
ALTER TABLE nodes ADD COLUMN gpu_source text NOT NULL DEFAULT 'nvidia';

-- One task (worker or PS shard) of one generation of a job. Rows of old generations stay as history.
CREATE TABLE tasks (
    job_id         uuid NOT NULL REFERENCES jobs (id),
    generation     bigint NOT NULL,
    role           text NOT NULL CHECK (role IN ('worker', 'ps')),
    idx            integer NOT NULL,
    node_name      text NOT NULL,
    gpus           jsonb NOT NULL,      -- GPU indices on the node
    cpus           integer NOT NULL,
    state          text NOT NULL,       -- assigned, prepared, running, stopping, exited, lost
    address        text,
    exit_code      integer,
    exit_signal    integer,
    message        text NOT NULL DEFAULT '',
    stop_requested boolean NOT NULL DEFAULT false,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (job_id, generation, role, idx)
);
CREATE INDEX tasks_live ON tasks (node_name) WHERE state NOT IN ('exited', 'lost');

CREATE TABLE metric_samples (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      uuid NOT NULL REFERENCES jobs (id),
    generation  bigint NOT NULL,
    role        text NOT NULL,
    idx         integer NOT NULL,
    num_ps      integer NOT NULL,
    num_workers integer NOT NULL,
    gpu_model   text NOT NULL,
    step        bigint NOT NULL,
    name        text NOT NULL,
    value       double precision NOT NULL,
    recorded_at timestamptz NOT NULL
);
CREATE INDEX metric_samples_job ON metric_samples (job_id, name, step);

CREATE TABLE checkpoints (
    id         uuid PRIMARY KEY,
    job_id     uuid NOT NULL REFERENCES jobs (id),
    generation bigint NOT NULL,
    step       bigint NOT NULL,
    path       text NOT NULL,
    size_bytes bigint NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX checkpoints_job ON checkpoints (job_id, step);

CREATE TABLE task_logs (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     uuid NOT NULL REFERENCES jobs (id),
    generation bigint NOT NULL,
    role       text NOT NULL,
    idx        integer NOT NULL,
    stream     text NOT NULL,
    line       text NOT NULL,
    logged_at  timestamptz NOT NULL
);
CREATE INDEX task_logs_job ON task_logs (job_id, id);
