-- Any write of a job's document moves its version, by whichever binary writes it: during a rolling
-- upgrade a replica that predates 0027 resizes a job without knowing the column, and the leader,
-- which keeps each document parsed until its version moves, would schedule the job by the old one.
CREATE FUNCTION bump_document_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.document_version := OLD.document_version + 1;
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_document_written BEFORE UPDATE OF document ON jobs
    FOR EACH ROW EXECUTE FUNCTION bump_document_version();
