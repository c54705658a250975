-- The node's taints, as its executor registered them (`--taint key=value:NoSchedule`): a JSON list of
-- {"key", "value"}; only jobs that tolerate every one run there.
ALTER TABLE nodes ADD COLUMN taints text NOT NULL DEFAULT '[]';
