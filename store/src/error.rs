//! The store's one error type.

use drover_core::IllegalTransition;

/// Errors of the store. Conflicts, missing rows and illegal transitions are the caller's to map to HTTP
/// statuses; `Database` is ours (a 5xx), never blamed on the client.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    /// A uniqueness rule was broken: `field` names the offending input.
    #[error("{message}")]
    Conflict {
        field: &'static str,
        message: String,
    },
    /// An `Idempotency-Key` was reused with a different request body.
    #[error("the idempotency key was already used for a different request")]
    IdempotencyMismatch,
    #[error(transparent)]
    IllegalTransition(#[from] IllegalTransition),
    /// A report from a task of an older (or unknown) generation of its job.
    #[error("generation {reported} is not the job's current generation {current}")]
    Fenced { current: u64, reported: u64 },
    #[error("the database holds a value this build cannot read: {0}")]
    Corrupt(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

pub type StoreResult<T> = Result<T, StoreError>;
