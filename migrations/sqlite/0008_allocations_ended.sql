-- The queue forecast reads jobs that ended since its last read, every few seconds.
CREATE INDEX allocations_ended ON allocations (ended_at);
