//! What every check of a job's document returns, and the two ways it fails: [`fail`] names the field
//! and says why; [`ensure`] fails unless a condition holds.

use crate::document::SpecError;

/// A check: `Ok`, or the field and the reason.
pub(super) type Check = Result<(), SpecError>;

pub(super) fn fail(field: &str, reason: impl Into<String>) -> Check {
    Err(SpecError::new(field, reason))
}

pub(super) fn ensure(ok: bool, field: &str, reason: impl FnOnce() -> String) -> Check {
    if ok { Ok(()) } else { fail(field, reason()) }
}
