//! The service's one error type: what went wrong and whose fault it is, in terms each entrance maps to
//! its own answer — the API to an HTTP status and `{"error": {"code", "message", "field"?}}`, the
//! Kubernetes controller to an event or a retry, the experiment driver to an experiment event. `code`
//! is the stable machine-readable name a client sees; `field` names the offending input.

use drover_core::SpecError;
use drover_store::StoreError;

/// Whose fault an error is, and what kind: each entrance maps these to its own answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request could not be read (malformed body, bad header).
    BadRequest,
    /// No valid credential.
    Unauthenticated,
    /// The caller may not do this.
    Forbidden,
    NotFound,
    /// The target's state or a uniqueness rule forbids it now.
    Conflict,
    /// Well-formed but invalid input.
    Invalid,
    /// A body or value larger than allowed.
    TooLarge,
    /// A rate or concurrency limit was reached.
    TooMany,
    /// A dependency (the database, the runtime) cannot answer now; retry.
    Unavailable,
    /// Ours; the cause was logged where it happened.
    Internal,
}

/// An operation's failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ServiceError {
    pub kind: ErrorKind,
    /// Stable and machine-readable (`invalid_spec`, `quota_exceeded`, …).
    pub code: &'static str,
    pub message: String,
    /// The input at fault, when one is.
    pub field: Option<String>,
}

pub type ServiceResult<T> = Result<T, ServiceError>;

impl ServiceError {
    pub fn new(kind: ErrorKind, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind,
            code,
            message: message.into(),
            field: None,
        }
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn bad_request(field: &str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, "bad_request", message).with_field(field)
    }

    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, "invalid", message).with_field(field)
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unauthenticated, "unauthenticated", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, "forbidden", message)
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, "not_found", what)
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, code, message)
    }

    pub fn internal() -> Self {
        Self::new(ErrorKind::Internal, "internal", "internal server error")
    }

    /// Whether the caller's input or situation is at fault (what HTTP calls a 4xx), rather than the
    /// server (`Unavailable`, `Internal`).
    pub fn is_client_error(&self) -> bool {
        !matches!(self.kind, ErrorKind::Unavailable | ErrorKind::Internal)
    }

    /// A store error on a lookup of `what`; a missing row becomes `NotFound` with that name.
    pub fn from_store(err: StoreError, what: impl FnOnce() -> String) -> Self {
        match err {
            StoreError::NotFound => Self::not_found(what()),
            other => other.into(),
        }
    }
}

impl From<SpecError> for ServiceError {
    fn from(err: SpecError) -> Self {
        let (kind, code) = if err.malformed {
            (ErrorKind::BadRequest, "malformed_body")
        } else {
            (ErrorKind::Invalid, "invalid_spec")
        };
        Self::new(kind, code, err.reason).with_field(err.field)
    }
}

impl From<StoreError> for ServiceError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound => Self::not_found("not found"),
            StoreError::Conflict { field, message } => {
                Self::new(ErrorKind::Conflict, "conflict", message).with_field(field)
            }
            StoreError::IdempotencyMismatch => Self::new(
                ErrorKind::Invalid,
                "idempotency_key_reused",
                "this Idempotency-Key was already used for a different request",
            )
            .with_field("Idempotency-Key"),
            StoreError::IllegalTransition(illegal) => Self::new(
                ErrorKind::Conflict,
                "illegal_transition",
                illegal.to_string(),
            ),
            fenced @ StoreError::Fenced { .. } => {
                Self::new(ErrorKind::Conflict, "stale_generation", fenced.to_string())
            }
            err @ (StoreError::Corrupt(_) | StoreError::Database(_) | StoreError::Migrate(_)) => {
                tracing::error!(error = %err, "store failure");
                if matches!(&err, StoreError::Database(sqlx::Error::PoolTimedOut)) {
                    Self::new(
                        ErrorKind::Unavailable,
                        "unavailable",
                        "the database is overloaded; retry",
                    )
                } else {
                    Self::internal()
                }
            }
        }
    }
}
