-- What the scheduling policy keeps between rounds that the store does not otherwise hold (issue #55):
-- Tiresias's queue level and order of entry per job, Drover's model moves and packing verdicts, the
-- model speed ratios learned from jobs gone. The leader saves what changed after each round; a new
-- leader, or a restarted server, restores it before its first round. `policy` is the configured
-- policy's name: another policy's state is left alone. Each `state` is the policy's own JSON.
CREATE TABLE policy_job_state (
    policy  text NOT NULL,
    job_id  uuid NOT NULL,
    state   text NOT NULL,
    PRIMARY KEY (policy, job_id)
);

CREATE TABLE policy_shared_state (
    policy      text PRIMARY KEY,
    state       text NOT NULL,
    updated_at  timestamptz NOT NULL
);
