//! What several server replicas share through the store: which replica leads (and where executors
//! reach it), and requests the leader must pass on to executors (a checkpoint now), so that any
//! replica can take them.

use super::StoreResult;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use drover_core::JobId;

/// The leading replica, as it announced itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderRecord {
    pub holder: String,
    /// Where executors reach its gateway (`http://10.0.0.5:7070`).
    pub gateway: String,
    pub since: DateTime<Utc>,
}

/// The leader's latest scheduling round, as the dashboard shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundRecord {
    pub policy: String,
    pub finished_at: DateTime<Utc>,
    pub duration_us: i64,
    /// The jobs the policy left waiting, in its order, with its reason (`insufficient_resources`, …).
    pub waiting: Vec<WaitingJob>,
    /// What the round left free once its plan was carried out; `None` in records from before.
    pub free: Option<RoundFree>,
}

/// A job a round left waiting: the policy's reason, and what its smallest shape needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingJob {
    pub job: JobId,
    pub reason: String,
    /// `None` in records from before rounds said it.
    pub needs: Option<Needs>,
}

impl WaitingJob {
    /// A waiting job with no needs recorded.
    pub fn new(job: JobId, reason: impl Into<String>) -> Self {
        WaitingJob {
            job,
            reason: reason.into(),
            needs: None,
        }
    }
}

/// What a job's smallest shape takes: GPUs, CPUs and host memory of all its tasks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Needs {
    pub gpus: u32,
    pub cpus: u32,
    pub memory_gb: u32,
}

/// The schedulable cluster's resources a round left free, and its totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RoundFree {
    pub gpus: u32,
    pub total_gpus: u32,
    pub cpus: u32,
    pub total_cpus: u32,
    pub memory_gb: u64,
}

/// The cluster's GPUs at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuUsage {
    pub at: DateTime<Utc>,
    pub total: u32,
    pub allocated: u32,
    pub running: u32,
    /// GPUs held per tenant (by name), tenants holding none left out.
    pub by_tenant: std::collections::BTreeMap<String, u32>,
}

/// The scheduling policy's state as the leader saved it (each part the policy's own JSON): per job,
/// and the part that is no job's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyState {
    pub jobs: Vec<(JobId, String)>,
    pub shared: Option<String>,
}

/// What changed in the policy's state since the leader last saved it.
#[derive(Debug, Clone, Copy, Default)]
pub struct PolicyStateChanges<'a> {
    /// Jobs whose part is new or changed.
    pub changed: &'a [(JobId, &'a str)],
    /// Jobs the policy no longer keeps anything of.
    pub removed: &'a [JobId],
    /// The shared part, when it changed.
    pub shared: Option<&'a str>,
    /// Forget what other policies saved (the first save after this policy was configured).
    pub forget_other_policies: bool,
}

impl PolicyStateChanges<'_> {
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty()
            && self.removed.is_empty()
            && self.shared.is_none()
            && !self.forget_other_policies
    }
}

#[async_trait]
pub trait ReplicaStore: Send + Sync {
    /// Announces this replica as the leader (the caller holds the leader lock).
    async fn record_leader(&self, leader: &LeaderRecord) -> StoreResult<()>;
    async fn leader(&self) -> StoreResult<Option<LeaderRecord>>;
    /// Withdraws `holder`'s announcement (it stops leading); another's stays.
    async fn clear_leader(&self, holder: &str) -> StoreResult<()>;
    /// Asks that the job's running tasks checkpoint now.
    async fn request_checkpoint(&self, job: JobId, at: DateTime<Utc>) -> StoreResult<()>;
    /// Jobs with a checkpoint request not yet passed on, with the request's time.
    async fn checkpoint_requests(&self) -> StoreResult<Vec<(JobId, DateTime<Utc>)>>;
    /// Marks the request of `at` passed on (a newer one stays).
    async fn clear_checkpoint_request(&self, job: JobId, at: DateTime<Utc>) -> StoreResult<()>;
    /// Replaces the record of the latest scheduling round.
    async fn record_round(&self, round: &RoundRecord) -> StoreResult<()>;
    async fn last_round(&self) -> StoreResult<Option<RoundRecord>>;
    /// Adds a sample of GPU use and forgets those before `keep_after`.
    async fn record_gpu_usage(
        &self,
        usage: &GpuUsage,
        keep_after: DateTime<Utc>,
    ) -> StoreResult<()>;
    /// Samples from `since` on, oldest first.
    async fn gpu_usage_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<GpuUsage>>;
    /// What the leader last saved of the policy named `policy` (the configured name).
    async fn policy_state(&self, policy: &str) -> StoreResult<PolicyState>;
    /// Saves what changed of the policy's state, in one transaction.
    async fn save_policy_state(
        &self,
        policy: &str,
        changes: PolicyStateChanges<'_>,
        at: DateTime<Utc>,
    ) -> StoreResult<()>;
}
