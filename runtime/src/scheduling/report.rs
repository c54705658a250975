//! What each round leaves for the dashboard and any replica to read: the policy, how long the round
//! took, the jobs left waiting with the policy's reasons, and once a minute the cluster's GPU use.
//! A round that leaves the same jobs waiting for the same reasons with the same room as the last
//! recorded one is not recorded again for [`UNCHANGED_KEPT`] (4,000 waiting jobs are a large row
//! to write four times a second for nothing new).

use crate::Runtime;
use crate::snapshot::Built;
use crate::wording::serde_name;
use chrono::Utc;
use drover_core::{JobId, JobState};
use drover_scheduler::place::FreeResources;
use drover_scheduler::{ClusterSnapshot, JobView, Shape};
use drover_scheduler::{JobPlan, Plan};
use drover_store::{Job, Needs, RoundFree, Task, WaitingJob};
use std::collections::{BTreeMap, HashMap, HashSet};

/// How often the leader samples the cluster's GPU use, and for how long samples are kept.
const USAGE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);
const USAGE_KEPT_DAYS: i64 = 8;

/// How long the last recorded round stands for later ones that changed nothing it shows.
const UNCHANGED_KEPT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the last recorded round showed, and when it was written.
#[derive(Debug)]
pub(super) struct Recorded {
    at: tokio::time::Instant,
    waiting: Vec<WaitingJob>,
    free: Option<RoundFree>,
}

/// What one round saw and decided, and when it began.
pub(super) struct Round<'r, 'b> {
    pub built: &'r Built<'b>,
    pub plan: &'r Plan,
    pub jobs: &'r [Job],
    pub live: &'r [Task],
    pub started: tokio::time::Instant,
}

/// Records the round for the dashboard (any replica's): the policy, how long the round took, the
/// jobs left waiting with the policy's reasons, and, once a minute, the cluster's GPU use. A
/// failure is logged; scheduling goes on.
pub(super) async fn record_round(
    runtime: &Runtime,
    policy: &str,
    sampled_at: &mut Option<tokio::time::Instant>,
    recorded: &mut Option<Recorded>,
    round: Round<'_, '_>,
) {
    let Round {
        built,
        plan,
        jobs,
        live,
        started,
    } = round;
    let store = &runtime.store;
    // The policy's order where it has one, else submission order (the snapshot's).
    let by_id: HashMap<JobId, &JobView> = built
        .snapshot
        .jobs
        .iter()
        .map(|view| (view.id, view))
        .collect();
    let order: Vec<&JobView> = if plan.order.is_empty() {
        built.snapshot.jobs.iter().collect()
    } else {
        plan.order
            .iter()
            .filter_map(|id| by_id.get(id).copied())
            .collect()
    };
    // Held jobs (stopping, or running on a node that takes no new tasks, as every node is for a
    // new leader until its executor comes back) are not waiting, whatever the plan says of them:
    // it is not carried out.
    let waiting = order
        .into_iter()
        .filter(|view| !built.held.contains(&view.id))
        .filter_map(|view| match plan.jobs.get(&view.id) {
            Some(JobPlan::Wait { reason }) => built.jobs.get(&view.id).map(|job| WaitingJob {
                job: job.id,
                reason: serde_name(reason),
                needs: Some(smallest_needs(view)),
            }),
            _ => None,
        })
        .collect();
    let mut round = drover_store::RoundRecord {
        policy: policy.to_owned(),
        finished_at: Utc::now(),
        duration_us: i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX),
        waiting,
        free: Some(left_free(&built.snapshot, plan)),
    };
    let unchanged = recorded.as_ref().is_some_and(|last| {
        last.at.elapsed() < UNCHANGED_KEPT
            && last.free == round.free
            && last.waiting == round.waiting
    });
    if !unchanged {
        match store.record_round(&round).await {
            Ok(()) => {
                *recorded = Some(Recorded {
                    at: tokio::time::Instant::now(),
                    waiting: std::mem::take(&mut round.waiting),
                    free: round.free,
                });
            }
            Err(err) => tracing::warn!(error = %err, "cannot record the scheduling round"),
        }
    }
    if sampled_at.is_some_and(|at| at.elapsed() < USAGE_EVERY) {
        return;
    }
    *sampled_at = Some(tokio::time::Instant::now());
    let running_jobs: HashSet<JobId> = jobs
        .iter()
        .filter(|job| job.state == JobState::Running)
        .map(|job| job.id)
        .collect();
    let tenant_of: HashMap<JobId, &str> = jobs
        .iter()
        .map(|job| (job.id, job.tenant_name.as_str()))
        .collect();
    let mut by_tenant: BTreeMap<String, u32> = BTreeMap::new();
    for task in live.iter().filter(|t| !t.gpus.is_empty()) {
        if let Some(tenant) = tenant_of.get(&task.key.job_id) {
            *by_tenant.entry((*tenant).to_owned()).or_default() += task.gpus.len() as u32;
        }
    }
    let gpus = |tasks: &mut dyn Iterator<Item = &Task>| -> u32 {
        tasks.map(|t| t.gpus.len() as u32).sum()
    };
    let usage = drover_store::GpuUsage {
        at: round.finished_at,
        total: built.snapshot.total_gpus(),
        allocated: gpus(&mut live.iter()),
        running: gpus(&mut live.iter().filter(|t| running_jobs.contains(&t.key.job_id))),
        by_tenant,
    };
    let keep_after = round.finished_at - chrono::Duration::days(USAGE_KEPT_DAYS);
    if let Err(err) = store.record_gpu_usage(&usage, keep_after).await {
        tracing::warn!(error = %err, "cannot record GPU use");
    }
}

/// What a job's smallest shape takes (its minimum workers and PS shards).
fn smallest_needs(view: &JobView) -> Needs {
    let shape = Shape {
        ps: view.ps.min,
        workers: view.workers.min,
    };
    Needs {
        gpus: view.gpus_at(shape),
        cpus: view.cpus_at(shape),
        memory_gb: u32::try_from(view.memory_gb_at(shape)).unwrap_or(u32::MAX),
    }
}

/// What the schedulable cluster has free once `plan` is carried out (every job it runs, at the
/// placement it gives), and its totals: what the jobs left waiting could have had.
fn left_free(snapshot: &ClusterSnapshot, plan: &Plan) -> RoundFree {
    let mut free = FreeResources::empty_cluster(snapshot);
    for view in &snapshot.jobs {
        if let Some(JobPlan::Run { placement, .. }) = plan.jobs.get(&view.id) {
            free.take(view, placement);
        }
    }
    RoundFree {
        gpus: free.free_gpus(),
        total_gpus: snapshot.total_gpus(),
        cpus: free.free_cpus(),
        total_cpus: snapshot.total_cpus(),
        memory_gb: free.free_memory_gb(),
    }
}
