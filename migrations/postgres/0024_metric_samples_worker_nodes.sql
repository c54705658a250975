-- On how many nodes the workers of a sample's generation ran (1: all on one node). A job's step
-- times measured over several nodes and on one, at the same shape, tell whether it should be kept
-- on one node (consolidated placement, issue #55). Samples stored before this are taken as on one.
ALTER TABLE metric_samples ADD COLUMN worker_nodes INTEGER NOT NULL DEFAULT 1;
