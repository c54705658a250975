//! Kubernetes: the `DroverJob` and `DroverExperiment` custom resources, the controller that reconciles
//! them with the store (run by the leading replica when the server is started with `--kubernetes`),
//! and node cordons.

mod admission;
pub mod controller;
pub mod crd;
mod edits;
mod events;
pub mod experiment_admission;
pub mod experiment_crd;
mod experiment_status;
pub mod experiments;
pub mod mirror;
pub mod nodes;
pub mod status;
