//! Kubernetes: the `DroverJob` custom resource, the controller that reconciles it with the store
//! (run by the leading replica when the server is started with `--kubernetes`), and node cordons.

mod admission;
pub mod controller;
pub mod crd;
mod edits;
mod events;
pub mod mirror;
pub mod nodes;
pub mod status;
