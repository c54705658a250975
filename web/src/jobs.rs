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
    /// The page before (newer jobs), and the first page.
    newer: Option<String>,
    newest: Option<String>,
    /// How many jobs match, in words ("1,204 jobs", "10,000 or more jobs").
    total: String,
    /// The filters in use, in words (empty without any).
    filtered: String,
    error: Option<String>,
    /// The caller may cancel, pause and resume jobs (the bulk actions).
    writer: bool,
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
    // A parameter the page does not know is said, not silently dropped.
    let unknown = pairs
        .iter()
        .find(|(k, _)| !FILTERS.contains(&k.as_str()))
        .map(|(k, _)| {
            format!("unknown filter `{k}` (the filters are state, tenant, label and name)")
        });
    let (views, next, prev, total, error) = match listed {
        Ok(list) => {
            let total = match (list.meta.total, list.meta.total_exact) {
                (1, true) => "1 job".to_owned(),
                (n, true) => format!("{} jobs", thousands(n)),
                (n, false) => format!("{} or more jobs", thousands(n)),
            };
            (
                list.jobs,
                list.meta.next_cursor,
                list.meta.prev_cursor,
                total,
                unknown,
            )
        }
        // A filter the API refuses is shown beside the form, with its field.
        Err(err) if err.status.is_client_error() => {
            let field = err.field.map(|f| format!("{f}: ")).unwrap_or_default();
            (
                Vec::new(),
                None,
                None,
                String::new(),
                Some(format!("{field}{}", err.message)),
            )
        }
        Err(err) => return error_page(err),
    };
    let filtered = [
        ("state", &filters.state),
        ("tenant", &filters.tenant),
        ("label", &filters.label),
        ("name containing", &filters.name),
    ]
    .iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| format!("{k} {v}"))
    .collect::<Vec<_>>()
    .join(", ");
    let rows = match rows(&state, views).await {
        Ok(rows) => rows,
        Err(err) => return error_page(err),
    };
    let link = |cursor: Option<String>| {
        let mut query: Vec<(String, String)> = forwarded
            .iter()
            .filter(|(k, _)| k != "cursor")
            .cloned()
            .collect();
        query.extend(cursor.map(|c| ("cursor".to_owned(), c)));
        if query.is_empty() {
            "/jobs".to_owned()
        } else {
            format!(
                "/jobs?{}",
                serde_urlencoded::to_string(query).unwrap_or_default()
            )
        }
    };
    let newest = prev.is_some().then(|| link(None));
    render(&JobsPage {
        writer: session.can_write_jobs(),
        layout: session.layout("jobs"),
        rows,
        filters,
        states: JobState::ALL.iter().map(|s| s.as_str()).collect(),
        next: next.map(|c| link(Some(c))),
        newer: prev.map(|c| link(Some(c))),
        newest,
        total,
        filtered,
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

/// `12345` as `12,345`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_are_grouped() {
        assert_eq!(super::thousands(0), "0");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(1000), "1,000");
        assert_eq!(super::thousands(1234567), "1,234,567");
    }
}
