-- Which log lines are contract lines (issue #53): a task's `{"drover": "metrics", …}` and
-- `{"drover": "checkpoint", …}` announcements, which log views hide by default. Set by the store as
-- lines arrive; lines from before are marked by their prefix (the form Drover's Python library and
-- engine write).
ALTER TABLE task_logs ADD COLUMN contract integer NOT NULL DEFAULT 0;
UPDATE task_logs SET contract = 1
 WHERE line LIKE '{"drover": "metrics"%' OR line LIKE '{"drover": "checkpoint"%';
