//! Drover's shared vocabulary, used by the control plane, the CLI and (later) the scheduler and executors:
//!
//! - [`experiment`]: the `DroverExperiment` document (a hyper-parameter search) and the trial jobs it
//!   builds ([`experiment_validate`] checks it);
//! - [`spec`]: the `DroverJob` document, parsed from JSON or YAML, and its validation ([`validate`]);
//! - `document` (what both documents share: `apiVersion`, kinds, metadata, [`SpecError`]), `schema`
//!   (their JSON schemas' helpers) and `parse` (reading either document, then checking it), behind
//!   the two documents' modules;
//! - [`state`]: the job state machine (the one place that knows which transitions are legal) and the
//!   typed reason codes every transition carries;
//! - [`tenancy`]: roles within a tenant;
//! - [`text`]: strings every store can keep (no NUL);
//! - [`json`]: JSON read as JSON Schema reads it (`2.0` is an integer; a key is named once);
//! - [`openapi`]: what the API's OpenAPI document says of the documents beyond utoipa's derives;
//! - [`ids`]: typed ids, so a tenant id cannot be passed where a job id is meant.

pub mod blocks;
mod document;
pub mod experiment;
pub mod experiment_validate;
pub mod ids;
pub mod json;
pub mod openapi;
mod parse;
mod schema;
pub mod spec;
pub mod state;
pub mod tenancy;
pub mod text;
pub mod validate;
pub mod yaml_budget;

pub use ids::{ExperimentId, JobId, TenantId, TokenId, UserId};
pub use parse::declares_kind;
pub use spec::{DroverJob, JobSpec, SpecError};
pub use state::{IllegalTransition, JobState, ReasonCode};
pub use tenancy::Role;
