//! The job state machine: the one place that knows which transitions are legal.
//!
//! ```text
//! queued ──► starting ──► running ──► succeeded
//!   ▲  │        │  │        │  ▲ │
//!   │  │        │  │        ▼  │ │
//!   │  │        │  │     rescaling
//!   │  └───► paused ◄─────┘  (any of starting/running/rescaling)
//!   └──────────┘   (preempted, suspended, executor lost, task failed with restarts left)
//! any non-final ──► cancelled;  starting/running/rescaling ──► failed
//! ```
//!
//! Every transition is recorded as an event with a [`ReasonCode`] (shared with the scheduler) and a human
//! message. Callers never compare states themselves: they call [`JobState::check_transition`].

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Where a job is in its life.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for resources (new, preempted, suspended, or restarting after a failure).
    Queued,
    /// Resources allocated; tasks are starting and meeting at the rendezvous.
    Starting,
    /// Every task reported ready; training (or the command) runs.
    Running,
    /// The plan changed the job's shape; tasks checkpoint and restart with the new shape.
    Rescaling,
    /// A user paused it; it holds nothing until resumed.
    Paused,
    /// Finished successfully. Final.
    Succeeded,
    /// Restarts exhausted or a user error. Final.
    Failed,
    /// A user cancelled it. Final.
    Cancelled,
}

/// A transition the state machine does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the job is `{from}` and cannot become `{to}`")]
pub struct IllegalTransition {
    pub from: JobState,
    pub to: JobState,
}

impl JobState {
    pub const ALL: [JobState; 8] = [
        JobState::Queued,
        JobState::Starting,
        JobState::Running,
        JobState::Rescaling,
        JobState::Paused,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Starting => "starting",
            JobState::Running => "running",
            JobState::Rescaling => "rescaling",
            JobState::Paused => "paused",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Succeeded, failed and cancelled jobs never change again.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }

    /// Whether the job holds (or is acquiring) cluster resources.
    pub fn holds_resources(self) -> bool {
        matches!(
            self,
            JobState::Starting | JobState::Running | JobState::Rescaling
        )
    }

    /// The transition table of ARCHITECTURE.md ("Job states").
    pub fn can_transition_to(self, to: JobState) -> bool {
        use JobState::*;
        match (self, to) {
            (Queued, Starting) => true,
            (Starting, Running) => true,
            (Running, Rescaling) | (Rescaling, Running) => true,
            (Starting | Running | Rescaling, Queued) => true,
            (Queued | Starting | Running | Rescaling, Paused) => true,
            (Paused, Queued) => true,
            (from, Cancelled) => !from.is_final(),
            (Starting | Running | Rescaling, Failed) => true,
            (Running, Succeeded) => true,
            _ => false,
        }
    }

    pub fn check_transition(self, to: JobState) -> Result<(), IllegalTransition> {
        if self.can_transition_to(to) {
            Ok(())
        } else {
            Err(IllegalTransition { from: self, to })
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL.into_iter().find(|state| state.as_str() == s).ok_or_else(|| {
            format!(
                "unknown job state `{s}` (expected one of queued, starting, running, rescaling, \
                 paused, succeeded, failed, cancelled)"
            )
        })
    }
}

/// Why a job changed state. Shared with the scheduler, whose plans carry these codes for every change;
/// serialised in snake_case, which is what the API and the events table show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    /// A user submitted the job.
    Submitted,
    /// The scheduler allocated resources.
    Allocated,
    /// Every task reported its address; training starts.
    RendezvousComplete,
    /// The plan changed the job's shape (grow or shrink).
    Resized,
    /// The plan moved the job's tasks to other nodes.
    Migrated,
    /// A job of higher priority (or a quota owner reclaiming capacity) took its resources.
    Preempted,
    /// Its time slice ended; it waits for the next one.
    Suspended,
    /// The executor running one of its tasks stopped answering.
    ExecutorLost,
    /// A task failed; the job restarts from its last checkpoint.
    TaskFailed,
    /// A task failed and no restarts are left.
    RestartsExhausted,
    /// It failed again before making a new checkpoint: a restart would only repeat the same steps.
    RepeatedFailure,
    /// The job cannot run as specified (bad dataset path, crash at step 0, …).
    UserError,
    /// A task used more host memory than `spec.resources.memory_gb_per_task` and its sandbox's
    /// limit killed it: the job's own doing, so it fails rather than restarting into the same end.
    OutOfMemory,
    /// A user paused it.
    PausedByUser,
    /// A user resumed it.
    ResumedByUser,
    /// A user cancelled it.
    CancelledByUser,
    /// A user changed its worker or PS ranges; the scheduler re-plans it.
    ResizedByUser,
    /// Its experiment stopped it: early stopping, a budget, or the experiment's cancellation.
    StoppedBySearch,
    /// Training reached its step budget or target, or the command exited 0.
    Completed,
}

impl ReasonCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::Submitted => "submitted",
            ReasonCode::Allocated => "allocated",
            ReasonCode::RendezvousComplete => "rendezvous_complete",
            ReasonCode::Resized => "resized",
            ReasonCode::Migrated => "migrated",
            ReasonCode::Preempted => "preempted",
            ReasonCode::Suspended => "suspended",
            ReasonCode::ExecutorLost => "executor_lost",
            ReasonCode::TaskFailed => "task_failed",
            ReasonCode::RestartsExhausted => "restarts_exhausted",
            ReasonCode::RepeatedFailure => "repeated_failure",
            ReasonCode::UserError => "user_error",
            ReasonCode::OutOfMemory => "out_of_memory",
            ReasonCode::PausedByUser => "paused_by_user",
            ReasonCode::ResumedByUser => "resumed_by_user",
            ReasonCode::CancelledByUser => "cancelled_by_user",
            ReasonCode::ResizedByUser => "resized_by_user",
            ReasonCode::StoppedBySearch => "stopped_by_search",
            ReasonCode::Completed => "completed",
        }
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ReasonCode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(s.to_owned()))
            .map_err(|_| format!("unknown reason code `{s}`"))
    }
}

#[cfg(test)]
mod tests {
    use super::JobState::*;
    use super::*;

    #[test]
    fn table_of_design_md_is_exactly_what_is_allowed() {
        let allowed = [
            (Queued, Starting),
            (Starting, Running),
            (Running, Rescaling),
            (Rescaling, Running),
            (Starting, Queued),
            (Running, Queued),
            (Rescaling, Queued),
            (Queued, Paused),
            (Starting, Paused),
            (Running, Paused),
            (Rescaling, Paused),
            (Paused, Queued),
            (Queued, Cancelled),
            (Starting, Cancelled),
            (Running, Cancelled),
            (Rescaling, Cancelled),
            (Paused, Cancelled),
            (Starting, Failed),
            (Running, Failed),
            (Rescaling, Failed),
            (Running, Succeeded),
        ];
        for from in JobState::ALL {
            for to in JobState::ALL {
                assert_eq!(
                    from.can_transition_to(to),
                    allowed.contains(&(from, to)),
                    "{from} -> {to}"
                );
            }
        }
    }

    #[test]
    fn final_states_never_move() {
        for from in [Succeeded, Failed, Cancelled] {
            for to in JobState::ALL {
                assert_eq!(
                    from.check_transition(to),
                    Err(IllegalTransition { from, to })
                );
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for state in JobState::ALL {
            assert_eq!(state.as_str().parse::<JobState>(), Ok(state));
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
        assert!("Running".parse::<JobState>().is_err());
        for code in [ReasonCode::RendezvousComplete, ReasonCode::CancelledByUser] {
            assert_eq!(code.as_str().parse::<ReasonCode>(), Ok(code));
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
        }
    }
}
