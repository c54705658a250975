//! The operations every entrance shares — the REST API, the dashboard, the Kubernetes controller and
//! the experiment driver — below HTTP, returning typed errors ([`error::ServiceError`]): submitting
//! jobs ([`jobs`]), their state changes and resizes, reading their logs ([`logs`]) and checkpoints
//! ([`checkpoints`]), creating and steering experiments ([`experiments`]), and the checks they make on the way — who the caller is and what they may do
//! ([`auth`]), quotas, waiting-job ceilings, secret references, whether any node could ever hold the
//! job ([`capacity`]) — with an audit record of every
//! privileged action ([`audit`]). Job submissions are stored in shared transactions ([`submissions`],
//! group commit). The experiment driver ([`experiments::run`]) turns searchers' decisions into jobs
//! through the same operations. Single sign-on through the company's OpenID Connect provider —
//! sign-in, the CLI's exchange, refreshing sessions, groups to tenants and roles — is [`sso`].
//!
//! Entrances hold a [`Service`]: the store, the runtime when this server runs jobs, the key that
//! seals tenant secrets, the limits, and the process's metrics.

pub mod audit;
pub mod auth;
pub mod bootstrap;
pub mod capacity;
pub mod checkpoints;
pub mod enrollment;
pub mod error;
pub mod experiments;
pub mod job_changes;
pub mod jobs;
pub mod logs;
pub mod metrics;
pub mod models;
pub mod nodes;
pub mod queue;
pub mod secrets;
mod service;
pub mod sso;
pub mod streams;
pub mod submissions;
pub mod tenants;
mod token_cache;
pub mod tokens;
pub mod usage;
pub mod users;

pub use error::{ErrorKind, ServiceError, ServiceResult};
pub use service::{Inner, Service};
pub use token_cache::TokenCache;
