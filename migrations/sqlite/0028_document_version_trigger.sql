-- Any write of a job's document moves its version, by whichever binary writes it: during a rolling
-- upgrade a replica that predates 0027 resizes a job without knowing the column, and the leader,
-- which keeps each document parsed until its version moves, would schedule the job by the old one.
-- The inner update does not set `document`, so it fires this trigger no more.
CREATE TRIGGER jobs_document_written AFTER UPDATE OF document ON jobs BEGIN
    UPDATE jobs SET document_version = OLD.document_version + 1 WHERE rowid = NEW.rowid;
END;
