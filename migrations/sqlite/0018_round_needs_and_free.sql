-- What a scheduling round left free once its plan was carried out (issue #53), so that the queue says
-- "needs 4 GPUs; 2 of 16 free": JSON {"gpus", "total_gpus", "cpus", "total_cpus", "memory_gb"}; `{}`
-- before. Each waiting entry of `waiting` may also carry what the job's smallest shape needs
-- ("gpus", "cpus", "memory_gb").
ALTER TABLE scheduler_rounds ADD COLUMN free text NOT NULL DEFAULT '{}';
