//! Kubernetes: the `DroverJob` custom resource, the controller that reconciles it with the store
//! (run by the leading replica when the server is started with `--kubernetes`), and node cordons.

pub mod controller;
pub mod crd;
pub mod nodes;
pub mod status;
