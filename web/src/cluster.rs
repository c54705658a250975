//! The cluster pages: the queue with each waiting job's reason, the nodes with their GPUs, and the
//! tenants with their quotas, use and the caller's API tokens.

use crate::page::{Layout, error_page, render};
use crate::session::Session;
use crate::time::{Time, timestamp};
use axum::extract::State;
use axum::response::Response;
use chrono::Utc;
use drover_api::error::ApiError;
use drover_api::routes::nodes::node_view;
use drover_api::state::AppState;
use drover_core::{JobId, JobState};
use drover_store::JobFilter;
use std::collections::{BTreeMap, HashMap};

/// Waiting jobs the queue page lists at most.
const QUEUE_LIMIT: u32 = 500;

#[derive(askama::Template)]
#[template(path = "queue.html")]
struct QueuePage {
    layout: Layout,
    policy: Option<String>,
    round_at: Option<Time>,
    waiting: Vec<Waiting>,
    paused: Vec<Waiting>,
}

#[derive(Debug)]
struct Waiting {
    position: String,
    id: String,
    name: String,
    tenant: String,
    priority: i32,
    reason: String,
    since: Time,
    /// The predicted start, e.g. `in 1 h 5 min`, with its p10–p90 band.
    start: String,
    band: String,
    start_at: Option<Time>,
}

/// `in 12 min` from now, or `now`.
fn from_now(at: Option<chrono::DateTime<Utc>>, now: chrono::DateTime<Utc>) -> String {
    match at {
        None => "—".to_owned(),
        Some(at) if at <= now + chrono::Duration::seconds(30) => "now".to_owned(),
        Some(at) => format!(
            "in {}",
            crate::time::duration((at - now).num_milliseconds() as f64 / 1000.0)
        ),
    }
}

pub async fn queue(State(state): State<AppState>, session: Session) -> Response {
    match queue_page(&state, &session).await {
        Ok(page) => render(&page),
        Err(err) => error_page(err),
    }
}

async fn queue_page(state: &AppState, session: &Session) -> Result<QueuePage, ApiError> {
    let scope = session.principal.scope();
    let list = async |state_filter: JobState| {
        let filter = JobFilter {
            states: vec![state_filter],
            limit: QUEUE_LIMIT,
            ..JobFilter::default()
        };
        state.store.list_jobs(scope, &filter).await
    };
    let queued = list(JobState::Queued).await?;
    let paused = list(JobState::Paused).await?;
    let round = state.store.last_round().await?;
    let forecast = state.store.queue_forecast().await?;
    // The policy's order at its last round; jobs it has not seen yet follow, oldest first.
    let order: HashMap<JobId, (usize, &str)> = round
        .as_ref()
        .map(|r| {
            r.waiting
                .iter()
                .enumerate()
                .map(|(i, (job, reason))| (*job, (i, reason.as_str())))
                .collect()
        })
        .unwrap_or_default();
    let predicted: HashMap<JobId, &drover_store::QueueEntry> = forecast
        .iter()
        .flat_map(|f| f.entries.iter())
        .map(|e| (e.job, e))
        .collect();
    let now = Utc::now();
    let mut queued: Vec<_> = queued
        .into_iter()
        .map(|job| {
            let known = order.get(&job.id).copied();
            (known, job)
        })
        .collect();
    queued.sort_by_key(|(known, job)| (known.map_or(usize::MAX, |(i, _)| i), job.created_at));
    let waiting = queued
        .into_iter()
        .enumerate()
        .map(|(i, (known, job))| {
            let entry = predicted.get(&job.id);
            let (start, band, start_at) = match entry {
                None => ("not forecast yet".to_owned(), String::new(), None),
                Some(e) if e.start.is_none() => ("beyond 30 days".to_owned(), String::new(), None),
                Some(e) => (
                    from_now(e.start, now),
                    format!(
                        "{} – {}",
                        from_now(e.p10, now),
                        e.p90.map_or("later".to_owned(), |p| from_now(Some(p), now))
                    ),
                    e.start.map(timestamp),
                ),
            };
            Waiting {
                start,
                band,
                start_at,
                position: (i + 1).to_string(),
                id: job.id.0.to_string(),
                name: job.name,
                tenant: job.tenant_name,
                priority: job.priority,
                reason: known.map_or_else(
                    || "not yet considered by the scheduler".to_owned(),
                    |(_, reason)| reason.replace('_', " "),
                ),
                since: timestamp(job.updated_at),
            }
        })
        .collect();
    let paused = paused
        .into_iter()
        .map(|job| Waiting {
            position: "—".to_owned(),
            id: job.id.0.to_string(),
            name: job.name,
            tenant: job.tenant_name,
            priority: job.priority,
            reason: job.message,
            since: timestamp(job.updated_at),
            start: String::new(),
            band: String::new(),
            start_at: None,
        })
        .collect();
    Ok(QueuePage {
        layout: session.layout("queue"),
        policy: round.as_ref().map(|r| r.policy.clone()),
        round_at: round.as_ref().map(|r| timestamp(r.finished_at)),
        waiting,
        paused,
    })
}

#[derive(askama::Template)]
#[template(path = "nodes.html")]
struct NodesPage {
    layout: Layout,
    nodes: Vec<NodeRow>,
}

#[derive(Debug)]
struct NodeRow {
    name: String,
    health: String,
    cordoned: bool,
    draining: bool,
    heartbeat: Option<Time>,
    cpus: u32,
    memory_gb: u32,
    source: String,
    /// How its tasks are isolated, in words.
    isolation: &'static str,
    /// Runs tasks in OCI images.
    runs_images: bool,
    /// `key=value` (for a job's `node_selector`) and its taints.
    labels: Vec<String>,
    gpus: Vec<GpuRow>,
}

#[derive(Debug)]
struct GpuRow {
    index: u32,
    model: String,
    memory: String,
    utilization: String,
    /// The task holding it, if the caller may see its job.
    holder: Option<(String, String)>,
}

pub async fn nodes(State(state): State<AppState>, session: Session) -> Response {
    let listed = drover_service::nodes::list(&state, &session.principal).await;
    let nodes: Vec<_> = match listed {
        Ok(nodes) => nodes.into_iter().map(node_view).collect(),
        Err(err) => return error_page(err.into()),
    };
    // The names of the jobs holding GPUs (the API lists only the caller's tenant's tasks).
    let active = state
        .store
        .list_jobs(
            session.principal.scope(),
            &JobFilter {
                states: vec![JobState::Starting, JobState::Running, JobState::Rescaling],
                limit: 10_000,
                ..JobFilter::default()
            },
        )
        .await;
    let names: HashMap<uuid::Uuid, String> = match active {
        Ok(jobs) => jobs.into_iter().map(|j| (j.id.0, j.name)).collect(),
        Err(err) => return error_page(err.into()),
    };
    let rows = nodes
        .into_iter()
        .map(|node| {
            let gpus = node
                .gpus
                .iter()
                .map(|gpu| {
                    let usage = node.gpu_usage.iter().find(|u| u.index == gpu.index);
                    let holder = node
                        .tasks
                        .iter()
                        .find(|t| t.gpus.contains(&(gpu.index as u16)))
                        .map(|t| {
                            let job = names.get(&t.job_id).map_or("a job", String::as_str);
                            (
                                t.job_id.to_string(),
                                format!("{job}: {}-{}", t.role.as_str(), t.index),
                            )
                        });
                    GpuRow {
                        index: gpu.index,
                        model: gpu.model.clone(),
                        memory: format!("{:.0} GB", gpu.memory_gb),
                        utilization: usage
                            .and_then(|u| u.utilization)
                            .map(|u| format!("{:.0}%", u * 100.0))
                            .unwrap_or_default(),
                        holder,
                    }
                })
                .collect();
            NodeRow {
                name: node.name,
                health: node.health,
                cordoned: node.cordoned,
                draining: node.draining,
                heartbeat: node.last_heartbeat_at.map(timestamp),
                cpus: node.cpus,
                memory_gb: node.memory_gb,
                source: node.gpu_source,
                isolation: match node.isolation.as_str() {
                    "runc" => "tasks sandboxed",
                    "pod" => "each task a Pod",
                    "none" => "tasks unconfined",
                    _ => "task isolation unknown",
                },
                runs_images: node.runs_images,
                labels: node
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .chain(
                        node.taints
                            .iter()
                            .map(|t| format!("taint {}={}:NoSchedule", t.key, t.value)),
                    )
                    .collect(),
                gpus,
            }
        })
        .collect();
    render(&NodesPage {
        layout: session.layout("nodes"),
        nodes: rows,
    })
}

#[derive(askama::Template)]
#[template(path = "tenants.html")]
struct TenantsPage {
    layout: Layout,
    tenants: Vec<TenantRow>,
    tokens: Vec<TokenRow>,
}

#[derive(Debug)]
struct TenantRow {
    name: String,
    guaranteed: u32,
    max: String,
    /// Its quota per GPU model, in words (`-` when it has none).
    per_model: String,
    in_use: u32,
    borrowed: u32,
    /// Guaranteed GPUs it does not use while other tenants borrow.
    lent: String,
    allocated_week: String,
    used_week: String,
    lost_week: String,
}

#[derive(Debug)]
struct TokenRow {
    id: String,
    name: String,
    prefix: String,
    created: Time,
    expires: Option<Time>,
    revoked: bool,
}

/// GPU-hours with their parts of a tenth or more: `12.0 (V100 9.0, K80 3.0)`.
fn hours_and_parts(total: f64, parts: &BTreeMap<String, f64>) -> String {
    let parts: Vec<String> = parts
        .iter()
        .filter(|(_, v)| **v >= 0.05)
        .map(|(name, v)| format!("{name} {v:.1}"))
        .collect();
    if parts.is_empty() {
        format!("{total:.1}")
    } else {
        format!("{total:.1} ({})", parts.join(", "))
    }
}

/// A tenant's quota per GPU model in words: `v100: 2 guaranteed, at most 4, lends 1; k80: at most 8`.
fn per_model(quota: &drover_store::Quota) -> String {
    if quota.flavours.is_empty() {
        return "-".to_owned();
    }
    quota
        .flavours
        .iter()
        .map(|f| {
            let mut parts = Vec::with_capacity(3);
            if f.guaranteed_gpus > 0 {
                parts.push(format!("{} guaranteed", f.guaranteed_gpus));
            }
            if let Some(max) = f.max_gpus {
                parts.push(format!("at most {max}"));
            }
            if let Some(lends) = f.lending_limit {
                parts.push(format!("lends {lends}"));
            }
            if parts.is_empty() {
                parts.push("no limit".to_owned());
            }
            format!("{}: {}", f.gpu_model, parts.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

pub async fn tenants(State(state): State<AppState>, session: Session) -> Response {
    match tenants_page(&state, &session).await {
        Ok(page) => render(&page),
        Err(err) => error_page(err),
    }
}

async fn tenants_page(state: &AppState, session: &Session) -> Result<TenantsPage, ApiError> {
    let tenants = drover_service::tenants::list(state, &session.principal).await?;
    // GPUs held now, by tenant: the live tasks of the jobs the caller may see.
    let active = state
        .store
        .list_jobs(
            session.principal.scope(),
            &JobFilter {
                states: vec![JobState::Starting, JobState::Running, JobState::Rescaling],
                limit: 10_000,
                ..JobFilter::default()
            },
        )
        .await?;
    let tenant_of: HashMap<JobId, &str> = active
        .iter()
        .map(|j| (j.id, j.tenant_name.as_str()))
        .collect();
    let mut in_use: BTreeMap<&str, u32> = BTreeMap::new();
    for task in state.store.live_tasks().await? {
        if let Some(tenant) = tenant_of.get(&task.key.job_id) {
            *in_use.entry(tenant).or_default() += task.gpus.len() as u32;
        }
    }
    // GPU-hours over the last 7 days from the accounting ledger, and the fair share now.
    let now = Utc::now();
    let usage = drover_service::usage::report(
        state,
        session.principal.scope(),
        now - chrono::Duration::days(7),
        now,
        drover_service::usage::By::Tenant,
        drover_runtime::accounting::Period::Total,
    )
    .await?;
    let hours: HashMap<&str, &drover_runtime::accounting::Totals> = usage
        .rows
        .iter()
        .map(|r| (r.tenant.as_str(), &r.totals))
        .collect();
    let lent: HashMap<&str, f64> = usage
        .fair_share
        .iter()
        .filter(|r| r.period_start.is_none())
        .map(|r| (r.tenant.as_str(), r.lent_gpus))
        .collect();
    let tenants = tenants
        .iter()
        .map(|t| {
            let used = in_use.get(t.name.as_str()).copied().unwrap_or(0);
            TenantRow {
                name: t.name.clone(),
                guaranteed: t.quota.guaranteed_gpus,
                max: t
                    .quota
                    .max_gpus
                    .map_or_else(|| "no limit".to_owned(), |m| m.to_string()),
                per_model: per_model(&t.quota),
                in_use: used,
                borrowed: used.saturating_sub(t.quota.guaranteed_gpus),
                lent: format!("{:.1}", lent.get(t.name.as_str()).copied().unwrap_or(0.0)),
                allocated_week: hours.get(t.name.as_str()).map_or("0.0".to_owned(), |h| {
                    hours_and_parts(h.allocated_gpu_hours, &h.allocated_gpu_hours_by_model)
                }),
                used_week: hours
                    .get(t.name.as_str())
                    .map_or("0.0".to_owned(), |h| format!("{:.1}", h.used_gpu_hours)),
                lost_week: hours.get(t.name.as_str()).map_or("0.0".to_owned(), |h| {
                    hours_and_parts(h.lost_gpu_hours, &h.lost_by_cause)
                }),
            }
        })
        .collect();
    let tokens = drover_service::tokens::list(state, &session.principal, None)
        .await?
        .into_iter()
        .map(|t| TokenRow {
            id: t.id.to_string(),
            name: t.name,
            prefix: t.prefix,
            created: timestamp(t.created_at),
            expires: t.expires_at.map(timestamp),
            revoked: t.revoked_at.is_some(),
        })
        .collect();
    Ok(TenantsPage {
        layout: session.layout("tenants"),
        tenants,
        tokens,
    })
}
