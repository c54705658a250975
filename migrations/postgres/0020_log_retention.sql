-- Retention (issue #55): the leader deletes log lines older than `--log-retention`, the oldest first,
-- a bounded batch a statement; this index finds them without reading the table.
CREATE INDEX task_logs_logged_at ON task_logs (logged_at);
