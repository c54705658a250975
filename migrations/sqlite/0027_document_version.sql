-- A job's document changes only when it is resized; its state changes (and `updated_at`) many times.
-- The leader keeps each active job's document parsed until this version moves (issue #55: keyed by
-- `updated_at`, every job started in a burst had its document read and parsed again twice).
ALTER TABLE jobs ADD COLUMN document_version INTEGER NOT NULL DEFAULT 0;
