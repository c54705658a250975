-- The GPUs of each model an allocation held (issue #52): a JSON object of model name to GPU count, from
-- its nodes' reported GPUs when it started; `{}` for allocations made before, and where a node's GPUs
-- were not known.
ALTER TABLE allocations ADD COLUMN gpu_models jsonb NOT NULL DEFAULT '{}';
