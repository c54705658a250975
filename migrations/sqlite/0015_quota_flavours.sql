-- A tenant's quota per GPU model (issue #52): a JSON list of {"gpu_model", "guaranteed_gpus",
-- "max_gpus", "lending_limit"}; empty, the quota is of GPUs of any model.
ALTER TABLE tenants ADD COLUMN quota_flavours text NOT NULL DEFAULT '[]';
