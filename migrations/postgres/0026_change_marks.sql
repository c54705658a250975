-- Every job, task and node row carries the id of the transaction that last wrote it, so the scheduling
-- loop reads only what changed since its last round (issue #55: reading all 12,000 active jobs,
-- 8,000 live tasks and 1,000 nodes took a third of a round). A row's mark is its writer; a reader's cursor is its
-- snapshot's oldest running transaction, so a slow writer that commits late is read next time.
-- The price: an update of these rows is never a heap-only update (`changed` is indexed), so each
-- adds an entry to every index of its table until vacuum removes the old one. A transaction held
-- open anywhere on the server holds the cursor back, and rows written since come again each read.
ALTER TABLE jobs ADD COLUMN changed xid8 NOT NULL DEFAULT '0';
ALTER TABLE tasks ADD COLUMN changed xid8 NOT NULL DEFAULT '0';
ALTER TABLE nodes ADD COLUMN changed xid8 NOT NULL DEFAULT '0';

CREATE FUNCTION mark_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.changed := pg_current_xact_id();
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_changed BEFORE INSERT OR UPDATE ON jobs
    FOR EACH ROW EXECUTE FUNCTION mark_changed();
CREATE TRIGGER tasks_changed BEFORE INSERT OR UPDATE ON tasks
    FOR EACH ROW EXECUTE FUNCTION mark_changed();
CREATE TRIGGER nodes_changed BEFORE INSERT OR UPDATE ON nodes
    FOR EACH ROW EXECUTE FUNCTION mark_changed();

CREATE INDEX jobs_changed ON jobs (changed);
CREATE INDEX tasks_changed ON tasks (changed);
CREATE INDEX nodes_changed ON nodes (changed);
