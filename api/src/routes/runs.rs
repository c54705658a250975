//! What a running job produces: `/api/v1/jobs/{id}/tasks`, `/metrics` and `/checkpoints` (the list;
//! the download is [`super::download`], the log [`super::logs`]). All tenant-scoped like the job.

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{PathParam, QueryPairs};
use crate::paging::ListMeta;
use crate::routes::jobs::parse_job_id;
use crate::run_views::{
    CheckpointList, CheckpointRequested, CheckpointView, MetricList, MetricView, TaskList,
    TaskUsagePoint, TaskUsageView, TaskView,
};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use drover_core::JobId;
use drover_service::auth::Principal;
use drover_store::{MetricFilter, MetricSample};
use futures::StreamExt;

const MAX_PAGE: u32 = 5000;

fn parse_step(query: &QueryPairs, field: &'static str) -> ApiResult<Option<u64>> {
    query
        .get(field)
        .map(|raw| {
            raw.parse::<u64>()
                .ok()
                .filter(|step| i64::try_from(*step).is_ok())
                .ok_or_else(|| {
                    ApiError::bad_request(field, "expected a step number from 0 to 2^63 - 1")
                })
        })
        .transpose()
}

/// Metric names asked for at once, at most.
const MAX_NAMES: usize = 32;

/// Asks a running job to write a checkpoint now, without stopping: its tasks get SIGUSR1 (the
/// command-job contract; a program that does not handle SIGUSR1 is terminated by it). The checkpoint
/// appears in `/checkpoints` once the job announces it.
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/checkpoint", tag = "jobs",
    params(("id" = String, Path, format = Uuid, description = "Job id")),
    responses(
        (status = 202, description = "The job's running tasks were asked to checkpoint", body = CheckpointRequested),
        (status = 403, description = "A viewer", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "The job is not running (`not_running`), or runs as Kubernetes Pods, which cannot be asked yet (`not_supported`)", body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn request_checkpoint(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<(axum::http::StatusCode, Json<CheckpointRequested>)> {
    let job_id = parse_job_id(&id)?;
    principal.require_job_writer()?;
    let job = state
        .store
        .get_job(principal.scope(), job_id)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
    if state.runtime.is_none() {
        return Err(ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "not_running",
            "this server runs no jobs",
        ));
    }
    // The request is kept in the store, so whichever replica leads passes it on (on its next round).
    let running = if job.state == drover_core::JobState::Running {
        let mut tasks = state.store.generation_tasks(job.id, job.generation).await?;
        tasks.retain(|t| t.state == drover_store::TaskState::Running && !t.stop_requested);
        tasks
    } else {
        Vec::new()
    };
    let asked = running.len();
    if asked == 0 {
        return Err(ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "not_running",
            format!(
                "job `{id}` is {}: only a running job can checkpoint",
                job.state.as_str()
            ),
        ));
    }
    // A task Pod is not its executor's process to signal (that needs the Kubernetes API's exec,
    // which task Pods are not given yet): refused rather than accepted and not passed on.
    let mut nodes = running
        .iter()
        .map(|t| t.node_name.as_str())
        .collect::<Vec<_>>();
    nodes.sort_unstable();
    nodes.dedup();
    for node in nodes {
        if matches!(state.store.get_node(node).await, Ok(n) if n.isolation == "pod") {
            return Err(ApiError::new(
                axum::http::StatusCode::CONFLICT,
                "not_supported",
                format!(
                    "job `{id}` runs as Kubernetes Pods (node {node}), which cannot be asked to checkpoint now yet: they checkpoint on their schedule and when stopped"
                ),
            ));
        }
    }
    state
        .store
        .request_checkpoint(job.id, chrono::Utc::now())
        .await?;
    state.wake_scheduler();
    Ok((
        axum::http::StatusCode::ACCEPTED,
        Json(CheckpointRequested {
            tasks: asked as u32,
        }),
    ))
}

/// Every task of every generation of the job, oldest generation first.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/tasks", tag = "jobs",
    params(("id" = String, Path, format = Uuid, description = "Job id")),
    responses((status = 200, body = TaskList), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn tasks(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<TaskList>> {
    let job_id = parse_job_id(&id)?;
    let tasks = state
        .store
        .job_tasks(principal.scope(), job_id)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
    Ok(Json(TaskList {
        tasks: tasks
            .into_iter()
            .map(|task| with_usage(&state, task))
            .collect(),
        meta: ListMeta { next_cursor: None },
    }))
}

/// A task as the API shows it, with what a running one uses as its executor last reported to this
/// server (the leader holds the executors' sessions) and over the last minutes.
pub fn with_usage(state: &AppState, task: drover_store::Task) -> TaskView {
    let usage = match (&state.runtime, task.state) {
        (Some(runtime), drover_store::TaskState::Running) => runtime
            .hub
            .task_usage(&task.node_name, &task.key)
            .map(|(latest, history)| TaskUsageView {
                history: history
                    .iter()
                    .map(|p| TaskUsagePoint::of(p.at, &p.usage))
                    .collect(),
                ..TaskUsageView::of(&latest)
            }),
        _ => None,
    };
    TaskView {
        usage,
        ..TaskView::from(task)
    }
}

/// Metric samples in the order they arrived, each tagged with the job's shape when it was measured.
/// With `format=csv`, every matching sample as a CSV file (`limit` and `cursor` do not apply).
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/metrics", tag = "jobs",
    params(
        ("id" = String, Path, format = Uuid, description = "Job id"),
        ("name" = Option<Vec<String>>, Query, max_items = 32, description = "Only these metrics (repeatable, at most 32)"),
        ("from_step" = Option<u64>, Query, maximum = 9223372036854775807_u64, description = "Only steps ≥ this (0 to 2^63 - 1)"),
        ("to_step" = Option<u64>, Query, maximum = 9223372036854775807_u64, description = "Only steps ≤ this (0 to 2^63 - 1); below `from_step`, an empty page"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 5000, description = "Page size, 1 to 5000 (default 1000)"),
        ("cursor" = Option<i64>, Query, description = "`meta.next_cursor` of the previous page (a sample's id)"),
        ("format" = Option<String>, Query, pattern = "^(json|csv)$", description = "`json` (default), or `csv`: every matching sample as a CSV file (`step,name,value,recorded_at,generation,task,workers,ps,gpu_model`), for download"),
    ),
    responses(
        (status = 200, description = "A page of samples; with `format=csv`, every matching sample as CSV",
         content((MetricList = "application/json"), (String = "text/csv"))),
        (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn metrics(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
    query: QueryPairs,
) -> ApiResult<Response> {
    query.only(&["name", "from_step", "to_step", "limit", "cursor", "format"])?;
    let job_id = parse_job_id(&id)?;
    let csv = match query.get("format") {
        None | Some("json") => false,
        Some("csv") => true,
        Some(_) => return Err(ApiError::bad_request("format", "expected json or csv")),
    };
    let limit = query.limit(1000, MAX_PAGE)?;
    let names: Vec<String> = query.all("name").map(str::to_owned).collect();
    if names.len() > MAX_NAMES {
        return Err(ApiError::bad_request(
            "name",
            format!("at most {MAX_NAMES} metric names at once"),
        ));
    }
    // `from_step` above `to_step` selects nothing: an empty page, as any filter that matches nothing.
    let filter = MetricFilter {
        names,
        from_step: parse_step(&query, "from_step")?,
        to_step: parse_step(&query, "to_step")?,
        after: query.id_cursor()?,
        limit: limit + 1,
    };
    if csv {
        return download_csv(state, principal, job_id, filter).await;
    }
    let mut samples = state
        .store
        .list_metrics(principal.scope(), job_id, &filter)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
    let next_cursor = if samples.len() > limit as usize {
        samples.truncate(limit as usize);
        samples.last().map(|s| s.id.to_string())
    } else {
        None
    };
    Ok(Json(MetricList {
        metrics: samples.into_iter().map(MetricView::from).collect(),
        meta: ListMeta { next_cursor },
    })
    .into_response())
}

/// The CSV header of a metrics download.
const CSV_HEADER: &str = "step,name,value,recorded_at,generation,task,workers,ps,gpu_model\n";

/// A CSV field: quoted (quotes doubled) when it holds a comma, a quote or a line break.
fn csv_field(out: &mut Vec<u8>, text: &str) {
    if text.contains([',', '"', '\n', '\r']) {
        out.push(b'"');
        out.extend_from_slice(text.replace('"', "\"\"").as_bytes());
        out.push(b'"');
    } else {
        out.extend_from_slice(text.as_bytes());
    }
}

fn csv_row(out: &mut Vec<u8>, sample: &MetricSample) {
    use std::io::Write;
    let _ = write!(out, "{},", sample.step);
    csv_field(out, &sample.name);
    let _ = write!(
        out,
        ",{},{},{},{}-{},{},{},",
        sample.value,
        sample
            .recorded_at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        sample.generation,
        sample.role.as_str(),
        sample.index,
        sample.num_workers,
        sample.num_ps,
    );
    csv_field(out, &sample.gpu_model);
    out.push(b'\n');
}

/// Every sample passing `filter` (from its cursor on) as a CSV file, read from the store a page at
/// a time as the client takes it (a series of millions of samples is never held whole).
async fn download_csv(
    state: AppState,
    principal: Principal,
    job: JobId,
    filter: MetricFilter,
) -> ApiResult<Response> {
    let scope = principal.scope();
    let name = crate::attachment::job_name(&state, scope, job).await?;
    let header = futures::stream::once(async {
        Ok::<_, std::io::Error>(bytes::Bytes::from_static(CSV_HEADER.as_bytes()))
    });
    let pages = futures::stream::unfold(Some(filter.after), move |cursor| {
        let state = state.clone();
        let mut filter = filter.clone();
        async move {
            filter.after = cursor?;
            filter.limit = MAX_PAGE;
            match state.store.list_metrics(scope, job, &filter).await {
                Ok(samples) if samples.is_empty() => None,
                Ok(samples) => {
                    let mut out = Vec::with_capacity(samples.len() * 80);
                    for sample in &samples {
                        csv_row(&mut out, sample);
                    }
                    let next = (samples.len() == MAX_PAGE as usize)
                        .then(|| samples.last().map(|s| Some(s.id)))
                        .flatten();
                    Some((Ok(bytes::Bytes::from(out)), next))
                }
                Err(err) => Some((Err(std::io::Error::other(err.to_string())), None)),
            }
        }
    });
    Ok(crate::attachment::streamed(
        header.chain(pages),
        "text/csv; charset=utf-8",
        &format!("{name}-metrics.csv"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_only_what_needs_it() {
        let mut out = Vec::new();
        csv_field(&mut out, "loss");
        out.push(b',');
        csv_field(&mut out, "a,\"b\"");
        assert_eq!(String::from_utf8(out).unwrap(), r#"loss,"a,""b""""#);
    }
}

/// The job's recorded checkpoints still in storage, oldest first (those its retention deleted are
/// not listed). Only recorded checkpoints are ever resumed from.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/checkpoints", tag = "jobs",
    params(("id" = String, Path, format = Uuid, description = "Job id")),
    responses((status = 200, body = CheckpointList), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn checkpoints(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<CheckpointList>> {
    let job_id = parse_job_id(&id)?;
    let records = drover_service::checkpoints::list(&state, &principal, job_id).await?;
    let root = state
        .runtime
        .as_ref()
        .map(|runtime| runtime.config.checkpoint_root.as_path());
    Ok(Json(CheckpointList {
        checkpoints: records
            .into_iter()
            .map(|record| CheckpointView::new(record, root))
            .collect(),
        meta: ListMeta { next_cursor: None },
    }))
}
