//! `/api/v1/jobs`: submit, read, list, and the events of a job (its state changes: `job_actions`).

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{Body, PathParam, QueryPairs};
use crate::paging::ListMeta;
use crate::state::AppState;
use crate::views::{EventList, EventView, JobEnvelope, JobList, JobListMeta, JobView};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use drover_core::spec::Format;
use drover_core::{DroverJob, JobId, JobState};
use drover_service::auth::Principal;
use drover_store::JobFilter;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
const MAX_PAGE: u32 = 500;

/// Submit a job (JSON or YAML `DroverJob`). With an `Idempotency-Key`, a retry returns the first job.
///
/// The schema gives each field's own bounds. These rules span fields or depend on the tenant, and
/// answer 422 naming the field: `metadata.name`, or else `metadata.generateName`, is given; a
/// `train` job has `spec.train` and no `spec.command`, a `command` job the reverse; each range's
/// `min` ≤ `max`; a `ps` job with more than one worker has at least one parameter-server shard, an
/// `allreduce` job none and no compression; `distributed.staleness` is 1 to 1000 with `sync: ssp`;
/// `gpu_memory_gb` needs `gpus_per_worker` ≥ 1; a train job's `batch_size` ≥ `workers.max`, it
/// sets `max_steps`, `target` or both, a loss target has `mode: min` and an accuracy's `value` is
/// between 0 and 1, a text dataset goes with the `charlm` model and only it, a `cnn` on synthetic
/// data has a square number of features (at least 16), a model's layers hold at most 2^30 weights
/// and a synthetic dataset at most 2^30 values, `charlm`'s `d_model` is divisible by `heads`, and
/// Nesterov momentum needs `momentum` > 0; a command's program (`argv[0]`) is not empty and each
/// argument is at most 65536 bytes; every `secret:` of the environment names one of the tenant's
/// secrets and `train.init_from` a checkpoint of the tenant; the job's smallest shape fits the
/// tenant's `max_gpus`; the document is at most 256 KiB as stored; an `Idempotency-Key` used before
/// comes with the same body.
#[utoipa::path(
    post, path = "/api/v1/jobs", tag = "jobs",
    request_body(content = DroverJob, description = "A DroverJob, as JSON (or YAML with Content-Type: application/yaml)", content_type = "application/json"),
    params((
        "Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 1, max_length = 255,
        pattern = "^[!-~]([\\t -~]*[!-~])?$",
        description = "Makes retries safe: the same key returns the first job. 1 to 255 printable ASCII characters."
    )),
    responses(
        (status = 201, description = "Created", body = JobEnvelope),
        (status = 200, description = "A retry with the same Idempotency-Key: the first job", body = JobEnvelope),
        (status = 400, description = "A body that is not JSON or YAML, or a malformed Idempotency-Key", body = ErrorBody),
        (status = 403, description = "A viewer", body = ErrorBody),
        (status = 409, description = "A job with this name exists in the tenant", body = ErrorBody),
        (status = 415, description = "A body that is neither JSON nor YAML (Content-Type)", body = ErrorBody),
        (status = 422, description = "Invalid spec; `field` names the problem", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn submit(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    principal.require_job_writer()?;
    let format = body_format(&headers, &body)?;
    let idempotency_key = idempotency_key(&headers)?;
    let mut job = DroverJob::parse(&body, format)?;
    job.status = None;
    let request_hash = idempotency_key
        .as_ref()
        .map(|_| Sha256::digest(&body).into());
    let outcome =
        drover_service::jobs::submit(&state, &principal, job, idempotency_key, request_hash)
            .await?;
    let job = outcome.value;
    let location = HeaderValue::from_str(&format!("/api/v1/jobs/{}", job.id)).ok();
    let status = if outcome.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut response = (
        status,
        Json(JobEnvelope {
            job: JobView::from(job),
        }),
    )
        .into_response();
    if let Some(location) = location {
        response.headers_mut().insert(header::LOCATION, location);
    }
    if !outcome.created {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

pub(crate) fn body_format(headers: &HeaderMap, body: &[u8]) -> ApiResult<Format> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    match content_type.map(|ct| {
        ct.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    }) {
        Some(ct) if ct == "application/json" || ct.ends_with("+json") => Ok(Format::Json),
        Some(ct)
            if matches!(
                ct.as_str(),
                "application/yaml" | "application/x-yaml" | "text/yaml" | "text/x-yaml"
            ) =>
        {
            Ok(Format::Yaml)
        }
        // Without a content type, a document that opens with `{` is JSON; anything else is read as YAML.
        None => Ok(if body.trim_ascii_start().starts_with(b"{") {
            Format::Json
        } else {
            Format::Yaml
        }),
        Some(other) => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "content type `{other}` is not accepted; send application/json or application/yaml"
            ),
        )
        .with_field("Content-Type")),
    }
}

fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .map_err(|_| ApiError::bad_request("Idempotency-Key", "must be printable ASCII"))?;
    if key.is_empty() || key.len() > 255 {
        return Err(ApiError::bad_request(
            "Idempotency-Key",
            "must be 1 to 255 characters",
        ));
    }
    Ok(Some(key.to_owned()))
}

/// Parses a job id from a path; a malformed id is simply an unknown job.
pub fn parse_job_id(raw: &str) -> ApiResult<JobId> {
    Ok(drover_service::jobs::parse_job_id(raw)?)
}

/// Get one job, with its whole spec.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}", tag = "jobs",
    params(("id" = String, Path, format = Uuid, description = "Job id")),
    responses((status = 200, body = JobEnvelope), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<JobEnvelope>> {
    let detail = drover_service::jobs::get(&state, &principal, &id).await?;
    Ok(Json(JobEnvelope {
        job: job_view(detail),
    }))
}

/// A job as one read of it shows it: with its models and queue place.
pub fn job_view(detail: drover_service::jobs::JobDetail) -> JobView {
    let mut view = JobView::from(detail.job);
    view.model = detail.model;
    view.queue = detail.queue;
    view
}

/// List jobs, newest first.
#[utoipa::path(
    get, path = "/api/v1/jobs", tag = "jobs",
    params(
        ("state" = Option<String>, Query, description = "Comma-separated states, e.g. `queued,running`",
         pattern = "^,*((queued|starting|running|rescaling|paused|succeeded|failed|cancelled)(,+(queued|starting|running|rescaling|paused|succeeded|failed|cancelled))*)?,*$"),
        ("label" = Option<String>, Query, description = "`key=value` (comma-separated or repeated): jobs carrying all of them. Keys are 1 to 316, values at most 63 letters, digits, `-`, `_`, `.` and `/`",
         pattern = "^([-A-Za-z0-9_./]{1,316}=[-A-Za-z0-9_./]{0,63})?(,([-A-Za-z0-9_./]{1,316}=[-A-Za-z0-9_./]{0,63})?)*$"),
        ("tenant" = Option<String>, Query, description = "Only this tenant's jobs: cluster administrators any tenant's, others only their own",
         max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size, 1 to 500 (default 50)"),
        ("cursor" = Option<String>, Query, pattern = "^([-A-Za-z0-9_]{21}[AQgw]|A[Q-Za-f][-A-Za-z0-9_]{20}[AEIMQUYcgkosw048])$", description = "`meta.next_cursor` for the next (older) page, `meta.prev_cursor` for the page before (newer)"),
        ("name" = Option<String>, Query, max_length = 253, description = "Only jobs whose name contains this text (at most 253 characters)"),
    ),
    responses(
        (status = 200, body = JobList), (status = 400, body = ErrorBody),
        (status = 403, description = "Another tenant (`tenant`), for anyone but a cluster administrator", body = ErrorBody),
        (status = 404, description = "No such tenant (`tenant`), for a cluster administrator", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
    query: QueryPairs,
) -> ApiResult<Json<JobList>> {
    Ok(Json(list_page(&state, &principal, &query).await?))
}

/// The page of jobs a listing's query asks for (`state`, `label`, `tenant`, `name`, `limit`,
/// `cursor`): the query language of `GET /api/v1/jobs`, which the dashboard's job list speaks too.
pub async fn list_page(
    state: &AppState,
    principal: &Principal,
    query: &QueryPairs,
) -> ApiResult<JobList> {
    query.only(&["state", "label", "tenant", "name", "limit", "cursor"])?;
    let mut filter = JobFilter {
        limit: query.limit(50, MAX_PAGE)?,
        ..JobFilter::default()
    };
    for raw in query
        .all("state")
        .flat_map(|v| v.split(','))
        .filter(|s| !s.is_empty())
    {
        let state = raw
            .parse::<JobState>()
            .map_err(|reason| ApiError::bad_request("state", reason))?;
        if !filter.states.contains(&state) {
            filter.states.push(state);
        }
    }
    filter.labels = parse_label_selector(query.all("label"))?;
    if let Some(name) = query.get("name") {
        if name.chars().count() > 253 {
            return Err(ApiError::bad_request("name", "at most 253 characters"));
        }
        let name = name.trim();
        if !name.is_empty() {
            filter.name_contains = Some(name.to_ascii_lowercase());
        }
    }
    if let Some(cursor) = query.get("cursor") {
        match decode_cursor(cursor) {
            Some(Cursor::Older(id)) => filter.before = Some(id),
            Some(Cursor::Newer(id)) => filter.after = Some(id),
            None => {
                return Err(ApiError::bad_request(
                    "cursor",
                    "not a cursor this server issued; pass meta.next_cursor or meta.prev_cursor unchanged",
                ));
            }
        }
    }
    let scope =
        drover_service::auth::tenant_scope(state, principal, query.get("tenant"), "jobs").await?;
    let page = drover_service::jobs::list(state, scope, &filter).await?;
    let next_cursor = page
        .older
        .then(|| page.jobs.last().map(|job| encode_cursor(job.id)))
        .flatten();
    let prev_cursor = page
        .newer
        .then(|| page.jobs.first().map(|job| encode_newer_cursor(job.id)))
        .flatten();
    Ok(JobList {
        jobs: page.jobs.into_iter().map(JobView::from).collect(),
        meta: JobListMeta {
            next_cursor,
            prev_cursor,
            total: page.total,
            total_exact: page.total < u64::from(drover_service::jobs::MAX_COUNTED),
        },
    })
}

/// `team=vision,env=prod` (repeatable) into a map; keys and values use label syntax.
fn parse_label_selector<'a>(
    params: impl Iterator<Item = &'a str>,
) -> ApiResult<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    for term in params
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let (key, value) = term.split_once('=').ok_or_else(|| {
            ApiError::bad_request("label", format!("`{term}` is not `key=value`"))
        })?;
        let bad = |c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
        if key.is_empty()
            || key.len() > 316
            || key.contains(bad)
            || value.len() > 63
            || value.contains(bad)
        {
            return Err(ApiError::bad_request(
                "label",
                format!("`{term}` is not a valid label selector"),
            ));
        }
        labels.insert(key.to_owned(), value.to_owned());
    }
    Ok(labels)
}

/// A list cursor: the jobs older than a job (the next page), or the nearest newer (the page before).
enum Cursor {
    Older(JobId),
    Newer(JobId),
}

/// A marker byte before the job's id says a cursor goes towards newer jobs.
const NEWER: u8 = 1;

pub fn encode_cursor(id: JobId) -> String {
    URL_SAFE_NO_PAD.encode(id.0.as_bytes())
}

fn encode_newer_cursor(id: JobId) -> String {
    let mut bytes = Vec::with_capacity(17);
    bytes.push(NEWER);
    bytes.extend_from_slice(id.0.as_bytes());
    URL_SAFE_NO_PAD.encode(bytes)
}

fn decode_cursor(cursor: &str) -> Option<Cursor> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    match bytes.as_slice() {
        [NEWER, id @ ..] if id.len() == 16 => uuid::Uuid::from_slice(id)
            .ok()
            .map(|u| Cursor::Newer(JobId(u))),
        id => uuid::Uuid::from_slice(id)
            .ok()
            .map(|u| Cursor::Older(JobId(u))),
    }
}

/// Every state change of a job, oldest first, with its reason.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/events", tag = "jobs",
    params(
        ("id" = String, Path, format = Uuid, description = "Job id"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size, 1 to 500 (default 100)"),
        ("cursor" = Option<i64>, Query, description = "`meta.next_cursor` of the previous page (an event's id)"),
    ),
    responses((status = 200, body = EventList), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn events(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
    query: QueryPairs,
) -> ApiResult<Json<EventList>> {
    query.only(&["limit", "cursor"])?;
    let job_id = parse_job_id(&id)?;
    let page = query.limit(100, MAX_PAGE)?;
    let after = query.id_cursor()?;
    let mut events = state
        .store
        .list_job_events(principal.scope(), job_id, after, page + 1)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
    let next_cursor = if events.len() > page as usize {
        events.truncate(page as usize);
        events.last().map(|event| event.id.to_string())
    } else {
        None
    };
    Ok(Json(EventList {
        events: events.into_iter().map(EventView::from).collect(),
        meta: ListMeta { next_cursor },
    }))
}
