//! What the driver remembers between passes ([`Blocked`]) and what can go wrong with one experiment
//! in a pass ([`DriveError`]).

use chrono::{DateTime, Utc};
use drover_core::ExperimentId;
use drover_store::{ExperimentState, StoreError};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// What the driver remembers between passes (only to do less; nothing here is needed for
/// correctness): the last reason each experiment's trial could not be submitted, so a lasting refusal
/// (quota, queue cap) is recorded once as an event rather than every pass; and what each experiment
/// looked like at its last full pass, so a pass that would see nothing new is skipped.
#[derive(Debug, Default)]
pub struct Blocked {
    reasons: Mutex<HashMap<ExperimentId, String>>,
    seen: Mutex<HashMap<ExperimentId, (Watermark, std::time::Instant)>>,
}

/// The experiment's state and last update, its trial jobs' count and their last change.
pub(super) type Watermark = (ExperimentState, DateTime<Utc>, i64, Option<DateTime<Utc>>);

/// A pass is made at least this often (budgets by time and GPU-hours, early stopping on new metrics).
const FULL_PASS_EVERY: Duration = Duration::from_secs(10);

impl Blocked {
    /// `true` when `why` is new for the experiment.
    pub(super) fn note(&self, id: ExperimentId, why: &str) -> bool {
        let mut map = self
            .reasons
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.insert(id, why.to_owned()).as_deref() != Some(why)
    }

    pub(super) fn clear(&self, id: ExperimentId) {
        self.reasons
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&id);
    }

    /// `true` when the experiment looks as it did at the last pass, which was recent.
    pub(super) fn unchanged(&self, id: ExperimentId, mark: &Watermark) -> bool {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        seen.get(&id)
            .is_some_and(|(last, at)| last == mark && at.elapsed() < FULL_PASS_EVERY)
    }

    pub(super) fn passed(&self, id: ExperimentId, mark: Watermark) {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(id, (mark, std::time::Instant::now()));
    }
}

/// What went wrong with one experiment in a pass.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("submitting a trial job failed: {0}")]
    Submit(String),
}
