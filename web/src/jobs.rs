//! The jobs table: the REST list (`GET /api/v1/jobs`, same filters, same scoping, same cursor), with
//! each job's shape from its live tasks and its progress from its last reported step.

use crate::page::{Layout, error_page, render};
use crate::session::Session;
use crate::time::{Time, timestamp};
use axum::extract::{RawQuery, State};
use axum::response::Response;
use drover_api::extract::QueryPairs;
use drover_api::routes::jobs as api;
use drover_api::state::AppState;
use drover_api::views::JobView;
use drover_core::{JobId, JobState};
use drover_store::{Task, TaskRole};
use std::collections::HashMap;

/// The filters the page forwards to the API.
const FILTERS: [&str; 6] = ["state", "tenant", "label", "name", "cursor", "limit"];

#[derive(askama::Template)]
#[template(path = "jobs.html")]
struct JobsPage {
    layout: Layout,
    rows: Vec<JobRow>,
    filters: Filters,
    states: Vec<&'static str>,
    next: Option<String>,
    error: Option<String>,
}

/// The table's rows alone, as the live stream sends them.
#[derive(askama::Template)]
#[template(path = "jobs_rows.html")]
pub(crate) struct RowsFragment {
    pub rows: Vec<JobRow>,
}

/// The filter form's values, echoed back.
#[derive(Debug, Default)]
pub(crate) struct Filters {
    pub state: String,
    pub tenant: String,
    pub label: String,
    pub name: String,
}

/// One row of the table (also what the live stream redraws).
#[derive(Debug)]
pub(crate) struct JobRow {
    pub id: String,
    pub name: String,
    pub tenant: String,
    pub state: &'static str,
    pub shape: String,
    pub progress: String,
    /// 0 to 100, when there is a bound to measure against.
    pub percent: Option<u32>,
    pub created: Time,
    pub labels: String,
}

pub async fn page(
    State(state): State<AppState>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Response {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw.as_deref().unwrap_or("")).unwrap_or_default();
    let pick = |key: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let filters = Filters {
        state: pick("state"),
        tenant: pick("tenant"),
        label: pick("label"),
        name: pick("name"),
    };
    let forwarded: Vec<(String, String)> = pairs
        .iter()
        .filter(|(k, v)| FILTERS.contains(&k.as_str()) && !v.is_empty())
        .cloned()
        .collect();
    let listed = api::list_page(&state, &session.principal, &QueryPairs(forwarded.clone())).await;
    let (views, next, error) = match listed {
        Ok(list) => (list.jobs, list.meta.next_cursor, None),
        // A filter the API refuses is shown beside the form, with its field.
        Err(err) if err.status.is_client_error() => {
            let field = err.field.map(|f| format!("{f}: ")).unwrap_or_default();
            (Vec::new(), None, Some(format!("{field}{}", err.message)))
        }
        Err(err) => return error_page(err),
    };
    let rows = match rows(&state, views).await {
        Ok(rows) => rows,
        Err(err) => return error_page(err),
    };
    let next = next.map(|cursor| {
        let mut query: Vec<(String, String)> = forwarded
            .into_iter()
            .filter(|(k, _)| k != "cursor")
            .collect();
        query.push(("cursor".to_owned(), cursor));
        format!(
            "/jobs?{}",
            serde_urlencoded::to_string(query).unwrap_or_default()
        )
    });
    render(&JobsPage {
        layout: session.layout("jobs"),
        rows,
        filters,
        states: JobState::ALL.iter().map(|s| s.as_str()).collect(),
        next,
        error,
    })
}

/// The rows for `views`: shapes from the live tasks, progress from the last steps and the specs.
pub(crate) async fn rows(
    state: &AppState,
    views: Vec<JobView>,
) -> Result<Vec<JobRow>, drover_api::error::ApiError> {
    let ids: Vec<JobId> = views.iter().map(|v| JobId(v.id)).collect();
    let mut shapes: HashMap<JobId, Vec<Task>> = HashMap::new();
    if views.iter().any(|v| v.state.holds_resources()) {
        for task in state.store.live_tasks().await? {
            shapes.entry(task.key.job_id).or_default().push(task);
        }
    }
    let steps: HashMap<JobId, u64> = state.store.last_steps(&ids).await?.into_iter().collect();
    let bounds: HashMap<JobId, Option<u64>> = state
        .store
        .job_documents(&ids)
        .await?
        .into_iter()
        .map(|(id, _, document)| {
            (
                id,
                document
                    .pointer("/spec/train/max_steps")
                    .and_then(serde_json::Value::as_u64),
            )
        })
        .collect();
    Ok(views
        .into_iter()
        .map(|view| {
            let id = JobId(view.id);
            let shape = shapes
                .get(&id)
                .filter(|_| view.state.holds_resources())
                .map(|tasks| {
                    let current = tasks.iter().map(|t| t.key.generation).max().unwrap_or(0);
                    let tasks = tasks.iter().filter(|t| t.key.generation == current);
                    let (mut ps, mut workers, mut gpus) = (0, 0, 0);
                    for task in tasks {
                        match task.key.role {
                            TaskRole::Ps => ps += 1,
                            TaskRole::Worker => workers += 1,
                        }
                        gpus += task.gpus.len();
                    }
                    format!("{ps} PS · {workers} W · {gpus} GPU")
                })
                .unwrap_or_else(|| "—".to_owned());
            let step = steps.get(&id).copied();
            let bound = bounds.get(&id).copied().flatten();
            let (progress, percent) = match (step, bound) {
                (Some(step), Some(max)) if max > 0 => (
                    format!("{step} / {max}"),
                    Some((step.min(max) * 100 / max) as u32),
                ),
                (Some(step), _) => (format!("step {step}"), None),
                (None, _) => ("—".to_owned(), None),
            };
            JobRow {
                id: view.id.to_string(),
                name: view.name,
                tenant: view.tenant,
                state: view.state.as_str(),
                shape,
                progress,
                percent,
                created: timestamp(view.created_at),
                labels: view
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            }
        })
        .collect())
}
