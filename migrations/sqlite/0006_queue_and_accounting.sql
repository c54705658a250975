-- The leader's latest queue forecast, so that any replica can answer "when will my job start?".
CREATE TABLE queue_forecast (
    id           integer PRIMARY KEY CHECK (id = 1),
    policy       text NOT NULL,
    computed_at  text NOT NULL,
    entries      text NOT NULL,    -- JSON: [{"job", "position", "reason", "start", "finish", "p10", "p90"}] in queue order
    finishing    text NOT NULL     -- JSON: {"job id": predicted finish} of running jobs
);

-- Accounting: one row per generation of a job (an allocation of its tasks), opened with the tasks and
-- closed by the scheduling loop once they have all ended.
CREATE TABLE allocations (
    job_id        blob NOT NULL REFERENCES jobs (id),
    generation    bigint NOT NULL,
    tenant_id     blob NOT NULL,
    user_id       blob NOT NULL,
    gpus          integer NOT NULL,
    started_at    text NOT NULL,
    start_cause   text NOT NULL,   -- the job's reason when it was allocated: submitted, preempted, task_failed, resized, …
    ended_at      text,             -- NULL while any of its tasks lives
    end_cause     text,            -- completed, preemption, failure, resize, migration, paused, cancelled, other
    first_step_at text,             -- its first reported step
    kept_until    text,             -- the work done up to here survived (its last checkpoint, or completion)
    idle_gpu_s    real NOT NULL DEFAULT 0,  -- GPUs of workers that had finished while others ran
    PRIMARY KEY (job_id, generation)
);
CREATE INDEX allocations_open ON allocations (generation) WHERE ended_at IS NULL;
CREATE INDEX allocations_started ON allocations (started_at);
CREATE INDEX allocations_tenant ON allocations (tenant_id, started_at);
