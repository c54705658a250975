//! The `DroverJob` document (ARCHITECTURE.md, "Contracts"): one shape for REST, the CLI and Kubernetes.
//!
//! Parsing is strict: unknown fields and wrong types are errors that name the field. Everything a user
//! may leave out has the default the design gives. Semantic checks (ranges, combinations) live in
//! [`crate::validate`]; [`DroverJob::parse`] runs both.
//!
//! This module only gathers the document's parts: the job and its spec (`job`), the `train` and
//! `command` payloads, resources and checkpoints, the defaults; what it shares with `DroverExperiment`
//! (`apiVersion`, kinds, metadata, formats, [`SpecError`]) is re-exported here.

mod command;
mod defaults;
mod job;
mod resources;
mod train;

pub use crate::document::{API_VERSION, Format, KIND, MAX_DOCUMENT_BYTES, ObjectMeta, SpecError};
pub use command::*;
pub use defaults::DEFAULT_STALENESS;
pub use job::*;
pub use resources::*;
pub use train::*;
