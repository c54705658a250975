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

/// Waiting jobs on one page of the queue.
const QUEUE_PAGE: u32 = 200;

#[derive(askama::Template)]
#[template(path = "queue.html")]
struct QueuePage {
    layout: Layout,
    policy: Option<String>,
    round_at: Option<Time>,
    waiting: Vec<Waiting>,
    /// `Jobs 1–200 of 1,400`, and what is not ranked.
    shown: String,
    tenant: String,
    error: Option<String>,
    newer: Option<String>,
    older: Option<String>,
    paused: Vec<Waiting>,
}

/// The queue's rows: the page renders them, and its live stream sends them again when they change.
#[derive(askama::Template)]
#[template(path = "queue_rows.html")]
pub(crate) struct QueueRows {
    waiting: Vec<Waiting>,
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
    /// Said when the prediction rests on guessed lengths ([`guess_note`]); empty otherwise.
    guess: String,
}

/// What a prediction resting on `guesses` guessed lengths says of itself; empty for none.
pub(crate) fn guess_note(guesses: u32) -> String {
    match guesses {
        0 => String::new(),
        1 => "a rough guess: 1 job it waits on is like no job that has finished or been measured, \
              and is taken to run about an hour"
            .to_owned(),
        n => format!(
            "a rough guess: {n} jobs it waits on are like no job that has finished or been \
             measured, and are taken to run about an hour each"
        ),
    }
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

/// The query a queue page takes: `tenant` and `offset`.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub(crate) struct QueueQuery {
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    offset: Option<String>,
}

impl QueueQuery {
    fn offset(&self) -> Result<u32, ApiError> {
        match self.offset.as_deref().filter(|o| !o.is_empty()) {
            None => Ok(0),
            Some(raw) => raw
                .parse::<u32>()
                .ok()
                .filter(|n| *n <= drover_service::queue::MAX_QUEUE)
                .ok_or_else(|| {
                    ApiError::bad_request("offset", "must be a whole number of jobs to skip")
                }),
        }
    }

    fn link(&self, offset: u32) -> String {
        let mut pairs = Vec::new();
        if !self.tenant.is_empty() {
            pairs.push(("tenant", self.tenant.clone()));
        }
        if offset > 0 {
            pairs.push(("offset", offset.to_string()));
        }
        let query = serde_urlencoded::to_string(&pairs).unwrap_or_default();
        if query.is_empty() {
            "/queue".to_owned()
        } else {
            format!("/queue?{query}")
        }
    }
}

pub async fn queue(
    State(state): State<AppState>,
    session: Session,
    axum::extract::Query(query): axum::extract::Query<QueueQuery>,
) -> Response {
    match queue_page(&state, &session, &query).await {
        Ok(page) => render(&page),
        Err(err) => error_page(err),
    }
}

/// One page of the queue for `session` (the service's view, shared with `GET /api/v1/queue`).
pub(crate) async fn queue_view(
    state: &AppState,
    session: &Session,
    query: &QueueQuery,
) -> Result<drover_service::queue::QueueView, ApiError> {
    let offset = query.offset()?;
    let tenant = Some(query.tenant.as_str()).filter(|t| !t.is_empty());
    let scope =
        drover_service::auth::tenant_scope(state, &session.principal, tenant, "queue").await?;
    Ok(drover_service::queue::list(state, scope, offset, QUEUE_PAGE).await?)
}

/// The rows of a queue page, as of now.
pub(crate) fn queue_rows(view: &drover_service::queue::QueueView) -> QueueRows {
    let now = Utc::now();
    let waiting = view
        .jobs
        .iter()
        .map(|job| {
            let q = &job.queue;
            let (start, band, start_at) = match (&q.reason, q.position, q.predicted_start) {
                (Some(reason), _, _) if reason == "never_fits" => {
                    ("never".to_owned(), String::new(), None)
                }
                (_, None, _) => ("not forecast yet".to_owned(), String::new(), None),
                (_, Some(_), None) => ("beyond 30 days".to_owned(), String::new(), None),
                (_, Some(_), Some(at)) => (
                    if q.overdue {
                        "now (overdue)".to_owned()
                    } else {
                        from_now(Some(at), now)
                    },
                    format!(
                        "{} – {}",
                        from_now(q.p10, now),
                        q.p90.map_or("later".to_owned(), |p| from_now(Some(p), now))
                    ),
                    Some(timestamp(at)),
                ),
            };
            Waiting {
                guess: if start_at.is_some() {
                    guess_note(q.guesses)
                } else {
                    String::new()
                },
                start,
                band,
                start_at,
                position: q.position.map_or_else(|| "—".to_owned(), |p| p.to_string()),
                id: job.id.to_string(),
                name: job.name.clone(),
                tenant: job.tenant.clone(),
                priority: job.priority,
                reason: q.explanation.clone(),
                since: timestamp(job.submitted_at),
            }
        })
        .collect();
    QueueRows { waiting }
}

async fn queue_page(
    state: &AppState,
    session: &Session,
    query: &QueueQuery,
) -> Result<QueuePage, ApiError> {
    let (view, error) = match queue_view(state, session, query).await {
        Ok(view) => (view, None),
        // A filter the caller may not use, or a malformed offset: said on the page, the caller's
        // own queue shown.
        Err(err) if err.status.is_client_error() => (
            queue_view(state, session, &QueueQuery::default()).await?,
            Some(match &err.field {
                Some(field) => format!("{field}: {}", err.message),
                None => err.message.clone(),
            }),
        ),
        Err(err) => return Err(err),
    };
    let scope = session.principal.scope();
    let filter = JobFilter {
        states: vec![JobState::Paused],
        limit: QUEUE_PAGE,
        ..JobFilter::default()
    };
    let paused = state
        .store
        .list_jobs(scope, &filter)
        .await?
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
            guess: String::new(),
        })
        .collect();
    let first = view.offset + 1;
    let last = view.offset + view.jobs.len() as u32;
    let shown = if view.total == 0 {
        String::new()
    } else if view.jobs.is_empty() {
        format!("No jobs past {} of {}.", view.offset, view.total)
    } else {
        format!(
            "Jobs {first}–{last} of {}{}.",
            view.total,
            if view.complete {
                ""
            } else {
                " (the oldest 5,000 of a longer queue are ranked)"
            }
        )
    };
    let query = if error.is_some() {
        QueueQuery::default()
    } else {
        query.clone()
    };
    Ok(QueuePage {
        layout: session.layout("queue"),
        policy: view.policy.clone(),
        round_at: view.round_at.map(timestamp),
        shown,
        tenant: query.tenant.clone(),
        error,
        newer: (view.offset > 0).then(|| query.link(view.offset.saturating_sub(QUEUE_PAGE))),
        older: (last < view.total).then(|| query.link(last)),
        waiting: queue_rows(&view).waiting,
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
    /// Its use now, in words, and over the last minutes: sparklines of CPU and GPU utilisation.
    use_now: String,
    history_minutes: u32,
    cpu_spark: Option<String>,
    gpu_spark: Option<String>,
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
            let history = &node.history;
            let spark =
                |label: &str, pick: fn(&drover_api::views::UsagePointView) -> Option<f64>| {
                    let values: Vec<Option<f64>> = history.iter().map(pick).collect();
                    values
                        .iter()
                        .any(Option::is_some)
                        .then(|| drover_plot::sparkline(label, &values, 1.0))
                };
            // What the history spans: up to 15 minutes, less on a node (or a leader) just started.
            let minutes = match (history.first(), history.last()) {
                (Some(first), Some(last)) => crate::time::span_minutes(first.at, last.at),
                _ => 0,
            };
            let cpu_spark = spark(
                &format!("CPU utilisation over the last {minutes} min (0 to 100%)"),
                |p| p.cpu_utilization,
            );
            let gpu_spark = spark(
                &format!("mean GPU utilisation over the last {minutes} min (0 to 100%)"),
                |p| p.gpu_utilization,
            );
            let mut now = Vec::new();
            if let Some(host) = &node.host_usage {
                if let Some(cpu) = host.cpu_utilization {
                    now.push(format!("CPU {:.0}%", cpu * 100.0));
                }
                if host.memory_total_gb > 0.0 {
                    now.push(format!(
                        "memory {:.1} of {:.1} GB",
                        host.memory_used_gb, host.memory_total_gb
                    ));
                }
            }
            let gpu_known: Vec<f64> = node
                .gpu_usage
                .iter()
                .filter_map(|u| u.utilization)
                .collect();
            if !gpu_known.is_empty() {
                now.push(format!(
                    "GPUs {:.0}%",
                    100.0 * gpu_known.iter().sum::<f64>() / gpu_known.len() as f64
                ));
            }
            if !node.gpu_usage.is_empty() {
                now.push(format!(
                    "GPU memory {:.1} GB",
                    node.gpu_usage.iter().map(|u| u.memory_used_gb).sum::<f64>()
                ));
            }
            NodeRow {
                history_minutes: minutes,
                use_now: now.join(" · "),
                cpu_spark,
                gpu_spark,
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
    /// May create tenants and set quotas.
    cluster_admin: bool,
    /// May add users (a tenant's admin, to the tenant; a cluster administrator, anywhere).
    manages_users: bool,
    users: Vec<UserRow>,
}

#[derive(Debug)]
struct UserRow {
    name: String,
    tenant: String,
    role: String,
    created: Time,
}

#[derive(Debug)]
struct TenantRow {
    name: String,
    /// Its quota as the REST API takes it, for the quota form (which keeps its quotas per model).
    quota_json: String,
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
                quota_json: serde_json::to_string(&t.quota).unwrap_or_default(),
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
    let user = &session.principal.user;
    let manages_users = user.cluster_admin || user.role == drover_core::Role::Admin;
    let users = if manages_users {
        drover_service::users::list(state, &session.principal)
            .await?
            .into_iter()
            .map(|u| UserRow {
                role: if u.cluster_admin {
                    format!("{} (cluster administrator)", u.role.as_str())
                } else {
                    u.role.as_str().to_owned()
                },
                name: u.name,
                tenant: u.tenant_name,
                created: timestamp(u.created_at),
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(TenantsPage {
        layout: session.layout("tenants"),
        tenants,
        tokens,
        cluster_admin: user.cluster_admin,
        manages_users,
        users,
    })
}
