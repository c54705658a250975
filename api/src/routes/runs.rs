//! What a running job produces: `/api/v1/jobs/{id}/tasks`, `/metrics`, `/checkpoints` (list and
//! download) and `/logs` (pages, or a stream with `follow=true`). All tenant-scoped like the job.

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{PathParam, QueryPairs};
use crate::paging::ListMeta;
use crate::routes::jobs::parse_job_id;
use crate::run_views::{
    CheckpointList, CheckpointRequested, CheckpointView, LogLineView, LogList, MetricList,
    MetricView, TaskList, TaskView,
};
use crate::state::AppState;
use axum::Json;
use axum::body::Body as ResponseBody;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use drover_core::JobId;
use drover_service::auth::Principal;
use drover_service::streams::Refusal;
use drover_store::{MetricFilter, Scope};
use std::time::Duration;

const MAX_PAGE: u32 = 5000;
/// How often a followed log polls the store for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(300);

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
        tasks: tasks.into_iter().map(TaskView::from).collect(),
        meta: ListMeta { next_cursor: None },
    }))
}

/// Metric samples in the order they arrived, each tagged with the job's shape when it was measured.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/metrics", tag = "jobs",
    params(
        ("id" = String, Path, format = Uuid, description = "Job id"),
        ("name" = Option<Vec<String>>, Query, max_items = 32, description = "Only these metrics (repeatable, at most 32)"),
        ("from_step" = Option<u64>, Query, maximum = 9223372036854775807_u64, description = "Only steps ≥ this (0 to 2^63 - 1)"),
        ("to_step" = Option<u64>, Query, maximum = 9223372036854775807_u64, description = "Only steps ≤ this (0 to 2^63 - 1); below `from_step`, an empty page"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 5000, description = "Page size, 1 to 5000 (default 1000)"),
        ("cursor" = Option<i64>, Query, description = "`meta.next_cursor` of the previous page (a sample's id)"),
    ),
    responses((status = 200, body = MetricList), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn metrics(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
    query: QueryPairs,
) -> ApiResult<Json<MetricList>> {
    query.only(&["name", "from_step", "to_step", "limit", "cursor"])?;
    let job_id = parse_job_id(&id)?;
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
    }))
}

/// The job's recorded checkpoints, oldest first. Only recorded checkpoints are ever resumed from.
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
    let records = state
        .store
        .list_checkpoints(principal.scope(), job_id)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
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

/// The job's log lines (every task, every generation) in order. With `follow=true` the response is a
/// stream of JSON lines that stays open until the job ends.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/logs", tag = "jobs",
    params(
        ("id" = String, Path, format = Uuid, description = "Job id"),
        ("follow" = Option<bool>, Query, description = "Stream new lines (application/x-ndjson) until the job ends"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 5000, description = "Page size, 1 to 5000 (default 1000); ignored when following"),
        ("cursor" = Option<i64>, Query, description = "Start after this line id (`meta.next_cursor`)"),
    ),
    responses(
        (status = 200, description = "A page of lines; with `follow=true`, a stream of lines (`LogLineView`) as newline-delimited JSON",
         content((LogList = "application/json"), (LogLineView = "application/x-ndjson"))),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn logs(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
    query: QueryPairs,
) -> ApiResult<Response> {
    query.only(&["follow", "limit", "cursor"])?;
    let job_id = parse_job_id(&id)?;
    let after = query.id_cursor()?;
    let follow = match query.get("follow") {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::bad_request("follow", "expected true or false")),
    };
    let limit = query.limit(1000, MAX_PAGE)?;
    let scope = principal.scope();
    let slot = if follow {
        Some(
            state
                .streams
                .open(principal.user.id, principal.user.tenant_id)
                .map_err(|refusal| {
                    let status = match refusal {
                        Refusal::User | Refusal::Tenant => {
                            axum::http::StatusCode::TOO_MANY_REQUESTS
                        }
                        Refusal::Server => axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    };
                    ApiError::new(status, "too_many_streams", refusal.message())
                })?,
        )
    } else {
        None
    };
    let mut lines = state
        .store
        .list_logs(
            scope,
            job_id,
            after,
            if follow { MAX_PAGE } else { limit + 1 },
        )
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
    if !follow {
        let next_cursor = if lines.len() > limit as usize {
            lines.truncate(limit as usize);
            lines.last().map(|l| l.id.to_string())
        } else {
            lines
                .last()
                .map(|l| l.id.to_string())
                .or_else(|| after.map(|a| a.to_string()))
        };
        return Ok(Json(LogList {
            logs: lines.into_iter().map(LogLineView::from).collect(),
            meta: ListMeta { next_cursor },
        })
        .into_response());
    }
    let first: Vec<LogLineView> = lines.drain(..).map(LogLineView::from).collect();
    let stream = follow_stream(state, scope, job_id, after, first, slot);
    let mut response = ResponseBody::from_stream(stream).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(response)
}

struct Follow {
    state: AppState,
    scope: Scope,
    job: JobId,
    cursor: Option<i64>,
    pending: Vec<LogLineView>,
    done: bool,
    /// The end of its lifetime: the client reconnects from its last line's id.
    until: tokio::time::Instant,
    _slot: Option<drover_service::streams::StreamSlot>,
}

fn encode(lines: &[LogLineView]) -> bytes::Bytes {
    let mut out = Vec::with_capacity(lines.len() * 96);
    for line in lines {
        if serde_json::to_writer(&mut out, line).is_ok() {
            out.push(b'\n');
        }
    }
    out.into()
}

fn follow_stream(
    state: AppState,
    scope: Scope,
    job: JobId,
    after: Option<i64>,
    first: Vec<LogLineView>,
    slot: Option<drover_service::streams::StreamSlot>,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send {
    let cursor = first.last().map(|l| l.id).or(after);
    let start = Follow {
        state,
        scope,
        job,
        cursor,
        pending: first,
        done: false,
        until: tokio::time::Instant::now() + drover_service::streams::Streams::LIFETIME,
        _slot: slot,
    };
    futures::stream::unfold(start, |mut follow| async move {
        loop {
            if !follow.pending.is_empty() {
                let chunk = encode(&follow.pending);
                follow.pending.clear();
                return Some((Ok(chunk), follow));
            }
            if follow.done {
                return None;
            }
            // Read the job's state before the lines, so lines written just before it ended are not missed.
            let finished = match follow.state.store.get_job(follow.scope, follow.job).await {
                Ok(job) => job.state.is_final(),
                Err(_) => true,
            };
            match follow
                .state
                .store
                .list_logs(follow.scope, follow.job, follow.cursor, MAX_PAGE)
                .await
            {
                Ok(lines) if !lines.is_empty() => {
                    follow.cursor = lines.last().map(|l| l.id);
                    follow.pending = lines.into_iter().map(LogLineView::from).collect();
                }
                Ok(_) if finished => follow.done = true,
                // A stopping server ends the stream; the client follows on from its last line's id.
                Ok(_) if *follow.state.stopping.borrow() => follow.done = true,
                // Its lifetime is over: the client reconnects (and is authenticated again).
                Ok(_) if tokio::time::Instant::now() >= follow.until => follow.done = true,
                Ok(_) => tokio::time::sleep(FOLLOW_POLL).await,
                Err(err) => {
                    return Some((
                        Err(std::io::Error::other(err.to_string())),
                        Follow {
                            done: true,
                            ..follow
                        },
                    ));
                }
            }
        }
    })
}
