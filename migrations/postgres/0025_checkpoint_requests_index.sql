-- The scheduling loop asks every round which jobs a user asked to checkpoint. Almost none are:
-- a partial index answers from the few that are, where a scan of every job took 14 ms a round
-- at 12,000 jobs (issue #55's fleet benchmark).
CREATE INDEX jobs_checkpoint_requested ON jobs (id) WHERE checkpoint_requested_at IS NOT NULL;
