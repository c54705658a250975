//! Kubernetes: the `DroverJob` and `DroverExperiment` custom resources, the controller that reconciles
//! them with the store (run by the leading replica when the server is started with `--kubernetes`),
//! and node cordons. Everything it changes in Drover goes through `drover_service`'s operations — the
//! same submission, state changes and resizes as the REST API — never through HTTP; it does not
//! depend on the API crate.

mod admission;
mod context;
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
mod schema;
pub mod status;
