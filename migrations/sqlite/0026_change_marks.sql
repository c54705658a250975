-- Every job, task and node row carries a number that grows with every write, so the scheduling loop
-- reads only what changed since its last round (issue #55). SQLite runs one writer at a time, so
-- the numbers a transaction takes are above every number committed before it: a reader's cursor is
-- one past the highest it can see.
CREATE TABLE change_counter (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
);
INSERT INTO change_counter (id, seq) VALUES (1, 0);

ALTER TABLE jobs ADD COLUMN changed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN changed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN changed INTEGER NOT NULL DEFAULT 0;

-- The inner updates fire no trigger of their own: each changes `changed`, which the update
-- triggers' WHEN clause excludes (and recursive triggers are off).
CREATE TRIGGER jobs_inserted AFTER INSERT ON jobs BEGIN
    UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
    UPDATE jobs SET changed = (SELECT seq FROM change_counter WHERE id = 1) WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER jobs_updated AFTER UPDATE ON jobs WHEN NEW.changed = OLD.changed BEGIN
    UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
    UPDATE jobs SET changed = (SELECT seq FROM change_counter WHERE id = 1) WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER tasks_inserted AFTER INSERT ON tasks BEGIN
    UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
    UPDATE tasks SET changed = (SELECT seq FROM change_counter WHERE id = 1) WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER tasks_updated AFTER UPDATE ON tasks WHEN NEW.changed = OLD.changed BEGIN
    UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
    UPDATE tasks SET changed = (SELECT seq FROM change_counter WHERE id = 1) WHERE rowid = NEW.rowid;
END;

CREATE TRIGGER nodes_inserted AFTER INSERT ON nodes BEGIN
    UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
    UPDATE nodes SET changed = (SELECT seq FROM change_counter WHERE id = 1) WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER nodes_updated AFTER UPDATE ON nodes WHEN NEW.changed = OLD.changed BEGIN
    UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
    UPDATE nodes SET changed = (SELECT seq FROM change_counter WHERE id = 1) WHERE rowid = NEW.rowid;
END;

CREATE INDEX jobs_changed ON jobs (changed);
CREATE INDEX tasks_changed ON tasks (changed);
CREATE INDEX nodes_changed ON nodes (changed);
