//! How much each tenant's tasks may write: log lines and metric samples go through a token bucket per
//! tenant (`Limits::log_lines`, `Limits::metric_samples`), so one tenant's chatty tasks cannot fill the
//! database or starve the others' reports. What is over the rate is dropped, and said: in the job's
//! own log (the last kept line of a cut batch becomes a notice) and, at most every 30 s a tenant, in
//! the server's log. Checkpoint announcements go through a fixed bucket per job
//! ([`CHECKPOINTS`]): every one is a row, and a task announcing them in a loop would grow the table
//! (and every listing of it) without bound.

use crate::limits::{Buckets, Limits, Rate};
use drover_core::{JobId, TenantId};
use drover_store::{Scope, Store, StoreError, StoreResult, TaskKey};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Jobs whose tenant is remembered at most (the map is cleared past it).
const MAX_REMEMBERED_JOBS: usize = 100_000;
const WARN_EVERY: Duration = Duration::from_secs(30);
/// New checkpoint records a job may make: bursts of 200, then one every 5 s. A checkpoint announced
/// past that still replaces the generation's previous one of its kind
/// (`Store::record_checkpoint_over_rate`): the job must resume from what its retention kept.
pub const CHECKPOINTS: Rate = Rate {
    per_second: 0.2,
    burst: 200.0,
};
/// Checkpoints past [`CHECKPOINTS`] a job may record each replacing the last: 100 a second, bursts
/// of 200 (a small model checkpointing every few steps announces about 60 a second). An announcement
/// past that waits in memory, replaced by the next, and is recorded when the task exits, so the last
/// checkpoint of a task that ends is always recorded.
pub const CHECKPOINT_REPLACEMENTS: Rate = Rate {
    per_second: 100.0,
    burst: 200.0,
};

/// A checkpoint announcement that waits to be recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Deferred {
    pub step: u64,
    pub path: String,
    pub size_bytes: u64,
}

/// How a checkpoint announcement is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CheckpointAdmission {
    /// As a record of its own.
    New,
    /// Replacing the generation's previous record made past the rate.
    Replacing,
    /// Later: it waits ([`Ingest::defer_checkpoint`]).
    Deferred,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    LogLines,
    MetricSamples,
}

#[derive(Debug)]
pub struct Ingest {
    log_lines: Buckets<TenantId>,
    metric_samples: Buckets<TenantId>,
    checkpoints: Buckets<JobId>,
    checkpoint_replacements: Buckets<JobId>,
    /// Per task, the newest announcement past both checkpoint rates.
    deferred: Mutex<HashMap<TaskKey, Deferred>>,
    tenant_of: Mutex<HashMap<JobId, TenantId>>,
    warned: Mutex<HashMap<TenantId, Instant>>,
}

impl Ingest {
    pub fn new(limits: &Limits) -> Self {
        Self {
            log_lines: Buckets::new(limits.log_lines),
            metric_samples: Buckets::new(limits.metric_samples),
            checkpoints: Buckets::new(CHECKPOINTS),
            checkpoint_replacements: Buckets::new(CHECKPOINT_REPLACEMENTS),
            deferred: Mutex::new(HashMap::new()),
            tenant_of: Mutex::new(HashMap::new()),
            warned: Mutex::new(HashMap::new()),
        }
    }

    fn buckets(&self, kind: Kind) -> &Buckets<TenantId> {
        match kind {
            Kind::LogLines => &self.log_lines,
            Kind::MetricSamples => &self.metric_samples,
        }
    }

    pub(super) fn rate(&self, kind: Kind) -> Rate {
        self.buckets(kind).rate()
    }

    /// How the job's next checkpoint announcement is recorded ([`CHECKPOINTS`],
    /// [`CHECKPOINT_REPLACEMENTS`]).
    pub(super) fn admit_checkpoint(&self, job: JobId) -> CheckpointAdmission {
        let now = Instant::now();
        if self.checkpoints.take_one(&job, now).is_ok() {
            CheckpointAdmission::New
        } else if self.checkpoint_replacements.take_one(&job, now).is_ok() {
            CheckpointAdmission::Replacing
        } else {
            CheckpointAdmission::Deferred
        }
    }

    fn deferred(&self) -> std::sync::MutexGuard<'_, HashMap<TaskKey, Deferred>> {
        self.deferred
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `checkpoint` as the task's newest announcement not yet recorded (one per task).
    /// Tasks that never report their exit (their executor was lost) leave theirs behind: past
    /// [`MAX_REMEMBERED_JOBS`] tasks the map is cleared.
    pub(super) fn defer_checkpoint(&self, key: TaskKey, checkpoint: Deferred) {
        let mut deferred = self.deferred();
        if deferred.len() >= MAX_REMEMBERED_JOBS && !deferred.contains_key(&key) {
            deferred.clear();
        }
        deferred.insert(key, checkpoint);
    }

    /// The task's announcement that waits, if any (taken: a newer record, or its exit, supersedes it).
    pub(super) fn take_deferred(&self, key: &TaskKey) -> Option<Deferred> {
        self.deferred().remove(key)
    }

    /// How many of `wanted` items of `kind` the job's tenant may write now.
    pub(super) async fn admit(
        &self,
        store: &dyn Store,
        job: JobId,
        kind: Kind,
        wanted: usize,
    ) -> StoreResult<usize> {
        let ingest = self;
        if wanted == 0 || ingest.rate(kind).is_unlimited() {
            return Ok(wanted);
        }
        let known = ingest
            .tenant_of
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&job)
            .copied();
        let tenant = match known {
            Some(tenant) => tenant,
            None => {
                let tenant = match store.get_job(Scope::Cluster, job).await {
                    Ok(found) => found.tenant_id,
                    Err(StoreError::NotFound) => return Ok(0),
                    Err(err) => return Err(err),
                };
                let mut remembered = ingest
                    .tenant_of
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if remembered.len() >= MAX_REMEMBERED_JOBS {
                    remembered.clear();
                }
                remembered.insert(job, tenant);
                tenant
            }
        };
        let now = Instant::now();
        let granted = ingest.buckets(kind).take_up_to(&tenant, wanted as f64, now) as usize;
        if granted < wanted {
            let mut warned = ingest
                .warned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let due = warned
                .get(&tenant)
                .is_none_or(|at| now.duration_since(*at) >= WARN_EVERY);
            if due {
                warned.insert(tenant, now);
                tracing::warn!(tenant.id = %tenant, job.id = %job, kind = ?kind, dropped = wanted - granted, "a tenant's tasks report faster than its rate; dropping the excess");
            }
        }
        Ok(granted)
    }
}

/// The notice that replaces the last kept line of a cut batch of logs.
pub(super) fn dropped_notice(dropped: usize, rate: Rate) -> String {
    format!(
        "[drover] {dropped} log line(s) dropped here: this tenant's tasks log faster than {} lines a second",
        rate.per_second
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use drover_core::Role;
    use drover_core::spec::JobType;
    use drover_store::{NewJob, NewTenant, NewUser, Quota, Store};

    /// A new tenant of this name with one member.
    pub(crate) async fn tenant_and_member(
        store: &dyn Store,
        tenant: &str,
    ) -> (drover_store::Tenant, drover_store::User) {
        let tenant = store
            .create_tenant(&NewTenant {
                name: tenant.to_owned(),
                quota: Quota::default(),
            })
            .await
            .unwrap();
        let user = store
            .create_user(&NewUser {
                tenant_id: tenant.id,
                name: "u".to_owned(),
                role: Role::Member,
                cluster_admin: false,
            })
            .await
            .unwrap();
        (tenant, user)
    }

    /// Starts the job's next generation with one worker on `node`; returns the worker's key.
    pub(crate) async fn started(store: &dyn Store, job: JobId, node: &str) -> TaskKey {
        let task = drover_store::NewTask {
            role: drover_store::TaskRole::Worker,
            index: 0,
            node_name: node.to_owned(),
            gpus: Vec::new(),
            cpus: 1,
        };
        let change = drover_store::StateChange {
            to: drover_core::JobState::Starting,
            reason: drover_core::ReasonCode::Allocated,
            message: String::new(),
            actor: None,
        };
        let generation = store
            .start_generation(job, &[task], &change)
            .await
            .unwrap()
            .unwrap();
        TaskKey {
            job_id: job,
            generation,
            role: drover_store::TaskRole::Worker,
            index: 0,
        }
    }

    /// A queued command job of a new tenant of this name.
    pub(crate) async fn job_of(store: &dyn Store, tenant: &str) -> JobId {
        let (tenant, user) = tenant_and_member(store, tenant).await;
        let job = store
            .create_job(&NewJob {
                id: JobId::new(),
                tenant_id: tenant.id,
                tenant_name: tenant.name.clone(),
                name: "chatty".to_owned(),
                job_type: JobType::Command,
                priority: 0,
                max_gpus: 1,
                labels: Default::default(),
                document: serde_json::json!({}),
                submitted_by: user.id,
                idempotency_key: None,
                request_hash: None,
                created_at: chrono::Utc::now(),
            })
            .await
            .unwrap();
        job.value.id
    }

    #[tokio::test]
    async fn each_tenant_reports_within_its_own_rate() {
        let db = drover_store::testing::TestDb::sqlite().await;
        let ingest = Ingest::new(&Limits {
            log_lines: Rate {
                per_second: 1.0,
                burst: 10.0,
            },
            ..Limits::NONE
        });
        let loud = job_of(db.store.as_ref(), "loud").await;
        let quiet = job_of(db.store.as_ref(), "quiet").await;
        assert_eq!(
            ingest
                .admit(db.store.as_ref(), loud, Kind::LogLines, 25)
                .await
                .unwrap(),
            10
        );
        assert_eq!(
            ingest
                .admit(db.store.as_ref(), loud, Kind::LogLines, 5)
                .await
                .unwrap(),
            0
        );
        // Another tenant is not held back by the first, and metrics are not limited here.
        assert_eq!(
            ingest
                .admit(db.store.as_ref(), quiet, Kind::LogLines, 4)
                .await
                .unwrap(),
            4
        );
        assert_eq!(
            ingest
                .admit(db.store.as_ref(), loud, Kind::MetricSamples, 500)
                .await
                .unwrap(),
            500
        );
        // A job the store does not know writes nothing.
        assert_eq!(
            ingest
                .admit(db.store.as_ref(), JobId::new(), Kind::LogLines, 3)
                .await
                .unwrap(),
            0
        );
        let notice = dropped_notice(
            15,
            Rate {
                per_second: 1.0,
                burst: 10.0,
            },
        );
        assert!(notice.contains("15 log line(s) dropped"), "{notice}");
    }
}
