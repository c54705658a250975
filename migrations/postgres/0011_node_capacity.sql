-- What a node advertised at its first registration with this credential (JSON: GPUs, the largest GPU
-- memory, CPUs, host memory). Later registrations may advertise no more: a stolen credential cannot
-- inflate the node to attract jobs. Re-enrolling the node (a new credential) pins it again.
ALTER TABLE node_credentials ADD COLUMN capacity text;
