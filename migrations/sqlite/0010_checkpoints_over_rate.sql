-- A checkpoint announced faster than the server records them one row each: it is still recorded (the
-- job must resume from what it kept), replacing the generation's previous such record, so a job
-- announcing in a loop holds one of these rows per generation, not one per announcement.
ALTER TABLE checkpoints ADD COLUMN over_rate integer NOT NULL DEFAULT 0;
