//! Jobs side by side (`/compare?job=…&job=…`, reached from the jobs list and an experiment's
//! trials): each chosen metric drawn for every job on one chart (loss and accuracy by default, else
//! the first metrics reported), the last value of each, and the
//! jobs' specs flattened to fields with the fields that differ first. Every job is read through the
//! store's scoped queries, so a job the caller may not see is "not found", as on its own page.

use crate::charts::MAX_SERIES;
use crate::page::{Layout, render};
use crate::session::Session;
use crate::time::{Time, duration, timestamp};
use axum::extract::State;
use axum::response::Response;
use drover_api::error::ApiError;
use drover_api::extract::QueryPairs;
use drover_api::routes::jobs as api;
use drover_api::state::AppState;
use drover_core::JobId;
use drover_plot::{Chart, Series, XAxis};
use drover_store::Job;
use std::collections::BTreeMap;

/// The environment variable that carries a trial's hyper-parameters.
const HPARAMS: &str = drover_core::experiment::HPARAMS_ENV;

/// Metrics drawn when none is asked for and the jobs report neither loss nor accuracy.
const DEFAULT_METRICS: usize = 4;

/// Jobs compared at once, at most.
pub const MAX_JOBS: usize = 8;

#[derive(askama::Template)]
#[template(path = "compare.html")]
struct ComparePage {
    layout: Layout,
    error: Option<String>,
    jobs: Vec<Column>,
    /// Every metric any of the jobs reported, and whether it is drawn.
    metrics: Vec<(String, bool)>,
    log: bool,
    /// The last value of each drawn metric, a cell per job.
    last_values: Vec<(String, Vec<String>)>,
    charts: String,
    /// Spec fields whose values differ between the jobs, then those that do not.
    differ: Vec<(String, Vec<String>)>,
    same: Vec<(String, String)>,
}

struct Column {
    id: String,
    name: String,
    state: String,
    tenant: String,
    submitted: Time,
    ran: String,
    step: String,
}

/// `GET /compare`: the jobs `job` names (repeated), side by side.
pub async fn page(State(state): State<AppState>, session: Session, query: QueryPairs) -> Response {
    match compare_page(&state, &session, &query).await {
        Ok(page) => render(&page),
        Err(err) => crate::page::error_page(err),
    }
}

/// The jobs a query names, in its order, each once; a name that is not a job id, or more than
/// [`MAX_JOBS`], is an error naming `job`.
fn job_ids(query: &QueryPairs) -> Result<Vec<JobId>, ApiError> {
    let mut ids: Vec<JobId> = Vec::new();
    for raw in query.all("job").filter(|raw| !raw.is_empty()) {
        let id = api::parse_job_id(raw)
            .map_err(|_| ApiError::bad_request("job", format!("`{raw}` is not a job id")))?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    if ids.len() > MAX_JOBS {
        return Err(ApiError::bad_request(
            "job",
            format!(
                "{} jobs chosen; at most {MAX_JOBS} are compared at once",
                ids.len()
            ),
        ));
    }
    Ok(ids)
}

async fn compare_page(
    state: &AppState,
    session: &Session,
    query: &QueryPairs,
) -> Result<ComparePage, ApiError> {
    let scope = session.principal.scope();
    let mut error = None;
    let ids = match job_ids(query) {
        Ok(ids) => ids,
        Err(err) => {
            error = Some(format!("job: {}", err.message));
            Vec::new()
        }
    };
    let mut jobs: Vec<Job> = Vec::with_capacity(ids.len());
    for id in ids {
        match state.store.get_job(scope, id).await {
            Ok(job) => jobs.push(job),
            Err(drover_store::StoreError::NotFound) => {
                error.get_or_insert(format!("job: no job `{id}`"));
            }
            Err(err) => return Err(err.into()),
        }
    }
    if jobs.len() < 2 && error.is_none() {
        error = Some("Choose two jobs or more to compare: tick them in the jobs list or an experiment's trials.".to_owned());
    }
    // Every metric reported, in name order; those asked for drawn (by default loss and accuracy).
    let mut reported: Vec<String> = Vec::new();
    for job in &jobs {
        for name in state.store.metric_names(scope, job.id).await? {
            if !reported.contains(&name) {
                reported.push(name);
            }
        }
    }
    reported.sort();
    let asked: Vec<&str> = query.all("metric").collect();
    let drawn: Vec<String> = if asked.is_empty() {
        let usual: Vec<String> = reported
            .iter()
            .filter(|n| matches!(n.as_str(), "loss" | "accuracy"))
            .cloned()
            .collect();
        if usual.is_empty() {
            reported.iter().take(DEFAULT_METRICS).cloned().collect()
        } else {
            usual
        }
    } else {
        reported
            .iter()
            .filter(|n| asked.contains(&n.as_str()))
            .take(MAX_SERIES)
            .cloned()
            .collect()
    };
    let log = matches!(query.get("log"), Some("true" | "on"));
    let mut charts = String::new();
    let mut last_values = Vec::with_capacity(drawn.len());
    // Each job's last step of any metric drawn.
    let mut last_steps: Vec<Option<u64>> = vec![None; jobs.len()];
    for name in &drawn {
        let mut series = Vec::with_capacity(jobs.len());
        let mut last = Vec::with_capacity(jobs.len());
        for (i, job) in jobs.iter().enumerate() {
            let buckets = crate::series::buckets(state, scope, job.id, name).await?;
            if let Some(bucket) = buckets.last() {
                last_steps[i] = last_steps[i].max(Some(bucket.last_step));
            }
            let value = match buckets.last() {
                Some(bucket) => state
                    .store
                    .metric_points_after(scope, job.id, name, bucket.last_step.checked_sub(1), 1)
                    .await?
                    .first()
                    .map_or_else(
                        || "—".to_owned(),
                        |p| format!("{:.4} at step {}", p.value, p.step),
                    ),
                None => "—".to_owned(),
            };
            last.push(value);
            series.push(Series {
                name: job.name.clone(),
                points: buckets
                    .iter()
                    .map(|b| ((b.first_step + b.last_step) as f64 / 2.0, b.mean))
                    .collect(),
            });
        }
        let label = format!("{name} of the compared jobs by step");
        let mut chart = Chart::new(&label, XAxis::Steps, name, series);
        chart.title = Some(name);
        chart.log_y = log;
        charts.push_str(&chart.svg());
        last_values.push((name.clone(), last));
    }
    let (differ, same) = spec_rows(&jobs);
    let now = chrono::Utc::now();
    Ok(ComparePage {
        layout: session.layout("jobs"),
        error,
        jobs: jobs
            .iter()
            .zip(&last_steps)
            .map(|(job, step)| Column {
                id: job.id.to_string(),
                name: job.name.clone(),
                state: job.state.to_string(),
                tenant: job.tenant_name.clone(),
                submitted: timestamp(job.created_at),
                ran: duration(
                    ((if job.state.is_final() {
                        job.updated_at
                    } else {
                        now
                    }) - job.created_at)
                        .num_milliseconds() as f64
                        / 1000.0,
                ),
                step: step.map_or_else(|| "—".to_owned(), |s| s.to_string()),
            })
            .collect(),
        metrics: reported
            .into_iter()
            .map(|name| {
                let on = drawn.contains(&name);
                (name, on)
            })
            .collect(),
        log,
        last_values,
        charts,
        differ,
        same,
    })
}

/// Each job's spec as `field = value` leaves (`spec.train.optimizer.lr`), the fields whose values
/// differ between the jobs (a job without the field shows —) apart from those every job shares.
#[expect(clippy::type_complexity, reason = "two tables of rows")]
fn spec_rows(jobs: &[Job]) -> (Vec<(String, Vec<String>)>, Vec<(String, String)>) {
    let leaves: Vec<BTreeMap<String, String>> = jobs
        .iter()
        .map(|job| {
            let mut leaves = BTreeMap::new();
            if let Some(document) = job.document.as_deref() {
                flatten("", document, &mut leaves);
            }
            // Named in each column's heading.
            leaves.remove("metadata.name");
            leaves
        })
        .collect();
    let mut fields: Vec<&String> = leaves.iter().flat_map(|l| l.keys()).collect();
    fields.sort();
    fields.dedup();
    let mut differ = Vec::new();
    let mut same = Vec::new();
    for field in fields {
        let values: Vec<String> = leaves
            .iter()
            .map(|l| l.get(field).cloned().unwrap_or_else(|| "—".to_owned()))
            .collect();
        if values.windows(2).all(|w| w[0] == w[1]) {
            same.push((field.clone(), values.into_iter().next().unwrap_or_default()));
        } else {
            differ.push((field.clone(), values));
        }
    }
    (differ, same)
}

/// `value`'s leaves under `path`: objects by key, lists of plain values as one value, lists of
/// objects by index.
fn flatten(path: &str, value: &serde_json::Value, out: &mut BTreeMap<String, String>) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        serde_json::Value::Object(map) if !map.is_empty() => {
            for (key, value) in map {
                flatten(&join(key), value, out);
            }
        }
        serde_json::Value::Array(items) if items.iter().any(|i| i.is_object()) => {
            for (i, item) in items.iter().enumerate() {
                flatten(&format!("{path}[{i}]"), item, out);
            }
        }
        // A trial's hyper-parameters, which the server hands it as JSON in its environment: each a
        // field of its own.
        serde_json::Value::String(text) if path.ends_with(HPARAMS) => {
            match serde_json::from_str::<serde_json::Value>(text) {
                Ok(serde_json::Value::Object(params)) => {
                    for (name, value) in &params {
                        flatten(&format!("hyper-parameter {name}"), value, out);
                    }
                }
                _ => {
                    out.insert(path.to_owned(), text.clone());
                }
            }
        }
        // The same values one variable each: shown once, above.
        serde_json::Value::String(_)
            if path
                .rsplit('.')
                .next()
                .is_some_and(|key| key.starts_with(drover_core::experiment::HPARAM_ENV_PREFIX)) => {
        }
        serde_json::Value::String(text) => {
            out.insert(path.to_owned(), text.clone());
        }
        other => {
            out.insert(path.to_owned(), other.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_flatten_to_fields_and_differences_come_apart() {
        let mut leaves = BTreeMap::new();
        flatten(
            "",
            &serde_json::json!({
                "metadata": {"name": "a", "labels": {"team": "vision"}},
                "spec": {"train": {"lr": 0.1, "layers": [64, 64]}, "tasks": [{"gpus": 1}]},
            }),
            &mut leaves,
        );
        assert_eq!(leaves["spec.train.lr"], "0.1");
        assert_eq!(leaves["spec.train.layers"], "[64,64]");
        assert_eq!(leaves["spec.tasks[0].gpus"], "1");
        assert_eq!(leaves["metadata.labels.team"], "vision");
        let mut trial = BTreeMap::new();
        flatten(
            "",
            &serde_json::json!({"spec": {"env": {HPARAMS: r#"{"lr": 0.01, "optimizer": "sgd"}"#}}}),
            &mut trial,
        );
        assert_eq!(trial["hyper-parameter lr"], "0.01");
        assert_eq!(trial["hyper-parameter optimizer"], "sgd");

        let ids = job_ids(&QueryPairs(vec![
            ("job".into(), uuid::Uuid::nil().to_string()),
            ("job".into(), uuid::Uuid::nil().to_string()),
        ]))
        .unwrap();
        assert_eq!(ids.len(), 1, "a job named twice is compared once");
        let err = job_ids(&QueryPairs(vec![("job".into(), "x".into())])).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("job"));
    }
}
