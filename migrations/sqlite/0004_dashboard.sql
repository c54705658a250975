-- What the dashboard shows of the scheduler, written by the leading replica so that any replica can
-- read it: its latest round, and the cluster's GPU use sampled over time.
CREATE TABLE scheduler_rounds (
    id           integer PRIMARY KEY CHECK (id = 1),
    policy       text NOT NULL,
    finished_at  text NOT NULL,
    duration_us  bigint NOT NULL,
    waiting      text NOT NULL     -- JSON: [{"job": id, "reason": wait reason}] in the policy's order
);

CREATE TABLE gpu_usage (
    at         text PRIMARY KEY,
    total      integer NOT NULL,   -- GPUs on healthy, connected nodes
    allocated  integer NOT NULL,   -- held by tasks
    running    integer NOT NULL,   -- held by tasks of jobs that run (not starting or rescaling)
    by_tenant  text NOT NULL       -- JSON: {"tenant name": GPUs held}
);
