//! The policy's state across leaders: the first round of a term builds the configured policy afresh
//! and restores what the last leader saved ([`restore`]); every round then saves what changed
//! ([`Saved::save`]), in one transaction, before its plan is carried out. So a new leader, or a
//! restarted server, keeps every waiting job's queue level and order.

use crate::Runtime;
use chrono::Utc;
use drover_core::JobId;
use drover_scheduler::policy::{Restored, SavedState};
use drover_scheduler::{Policy, build_policy};
use drover_store::{PolicyStateChanges, StoreError, StoreResult};
use std::collections::HashMap;

/// What the store holds of the policy's state, as this leader last saved (or restored) it.
#[derive(Debug, Default)]
pub(super) struct Saved {
    jobs: HashMap<JobId, String>,
    shared: Option<String>,
    /// Nothing saved yet this term: the first save forgets what other policies saved.
    first: bool,
}

/// The configured policy, built afresh with what the last leader saved of it.
pub(super) async fn restore(runtime: &Runtime) -> StoreResult<(Box<dyn Policy>, Saved)> {
    let name = &runtime.config.policy;
    let mut policy = build_policy(name, None).map_err(|err| {
        StoreError::Corrupt(format!("the configured policy cannot be built: {err}"))
    })?;
    let stored = runtime.store.policy_state(name).await?;
    let state = SavedState {
        jobs: stored.jobs.iter().cloned().collect(),
        shared: stored.shared.clone(),
    };
    let Restored { jobs, unreadable } = policy.restore(&state);
    if unreadable > 0 {
        tracing::warn!(
            policy = %name,
            unreadable,
            "part of the saved policy state cannot be read (another version wrote it?): those jobs start afresh in the queue"
        );
    }
    if jobs > 0 || state.shared.is_some() {
        tracing::info!(policy = %name, jobs, "restored the policy's state the last leader saved");
    }
    let saved = Saved {
        jobs: stored.jobs.into_iter().collect(),
        shared: stored.shared,
        first: true,
    };
    Ok((policy, saved))
}

impl Saved {
    /// Saves what changed since the last save. A failure is logged, and what it did not save is
    /// saved by the next round's.
    pub(super) async fn save(&mut self, runtime: &Runtime, state: SavedState) {
        let changed: Vec<(JobId, &str)> = state
            .jobs
            .iter()
            .filter(|(job, json)| self.jobs.get(job) != Some(*json))
            .map(|(&job, json)| (job, json.as_str()))
            .collect();
        let removed: Vec<JobId> = self
            .jobs
            .keys()
            .filter(|job| !state.jobs.contains_key(job))
            .copied()
            .collect();
        let shared = state
            .shared
            .as_deref()
            .filter(|s| self.shared.as_deref() != Some(*s));
        let changes = PolicyStateChanges {
            changed: &changed,
            removed: &removed,
            shared,
            forget_other_policies: self.first,
        };
        if changes.is_empty() {
            return;
        }
        let name = &runtime.config.policy;
        if let Err(err) = runtime
            .store
            .save_policy_state(name, changes, Utc::now())
            .await
        {
            tracing::warn!(error = %err, "cannot save the policy's state; the next round tries again");
            return;
        }
        self.first = false;
        let changed: Vec<JobId> = changed.into_iter().map(|(job, _)| job).collect();
        let mut jobs = state.jobs;
        for job in changed {
            if let Some(json) = jobs.remove(&job) {
                self.jobs.insert(job, json);
            }
        }
        for job in removed {
            self.jobs.remove(&job);
        }
        if state.shared.is_some() {
            self.shared = state.shared;
        }
    }
}
