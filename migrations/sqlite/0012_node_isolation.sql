-- How the node's executor isolates its tasks, as it registered: `runc` (each task in a sandbox of its
-- own), `none` (unconfined, `--no-sandbox`), or '' (an executor older than sandboxes).
ALTER TABLE nodes ADD COLUMN isolation text NOT NULL DEFAULT '';
