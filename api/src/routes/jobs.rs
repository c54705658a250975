//! `/api/v1/jobs`: submit, read, list, and the events of a job (its state changes: `job_actions`).

use crate::auth::Principal;
use crate::cluster::{Observer, parse_spec};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{Body, PathParam, QueryPairs};
use crate::model_views::JobModels;
use crate::state::AppState;
use crate::store::{Created, Job, JobFilter, NewJob, Quota, StoreError, TaskRole};
use crate::views::{EventList, EventView, JobEnvelope, JobList, JobView, ListMeta};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use drover_core::spec::Format;
use drover_core::{DroverJob, JobId, JobState};
use drover_scheduler::Shape;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
const MAX_PAGE: u32 = 500;

/// Submit a job (JSON or YAML `DroverJob`). With an `Idempotency-Key`, a retry returns the first job.
#[utoipa::path(
    post, path = "/api/v1/jobs", tag = "jobs",
    request_body(content = DroverJob, description = "A DroverJob, as JSON (or YAML with Content-Type: application/yaml)", content_type = "application/json"),
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe: the same key returns the first job")),
    responses(
        (status = 201, description = "Created", body = JobEnvelope),
        (status = 200, description = "A retry with the same Idempotency-Key: the first job", body = JobEnvelope),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 409, description = "A job with this name exists in the tenant", body = ErrorBody),
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
    let outcome = create_job(&state, &principal, job, idempotency_key, request_hash).await?;
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

/// Stores a parsed, validated job for `principal` after the quota, queue-length and secret checks a
/// submission gets (REST, the dashboard and the Kubernetes controller share it). With an idempotency
/// key used before in the tenant, returns the first job (`created: false`).
pub async fn create_job(
    state: &AppState,
    principal: &Principal,
    job: DroverJob,
    idempotency_key: Option<String>,
    request_hash: Option<[u8; 32]>,
) -> ApiResult<Created<Job>> {
    check_quota(&principal.user.tenant_name, &principal.tenant_quota, &job)?;
    check_waiting_jobs(state, principal).await?;
    super::secrets::check_references(
        state,
        principal.user.tenant_id,
        &principal.user.tenant_name,
        &job,
    )
    .await?;
    check_init_from(state, principal, &job).await?;
    // `metadata.generateName`: the name is the prefix and five random characters, drawn again
    // while the tenant has a job of that name.
    let prefix = job
        .metadata
        .name
        .is_empty()
        .then(|| job.metadata.generate_name.clone())
        .flatten();
    let mut job = job;
    let mut attempt = 0;
    let outcome = loop {
        if let Some(prefix) = &prefix {
            job.metadata.name = format!("{prefix}{}", name_suffix());
        }
        let new_job = NewJob {
            id: JobId::new(),
            tenant_id: principal.user.tenant_id,
            tenant_name: principal.user.tenant_name.clone(),
            name: job.metadata.name.clone(),
            job_type: job.spec.job_type,
            priority: job.spec.scheduling.priority,
            max_gpus: i64::try_from(job.max_gpus()).unwrap_or(i64::MAX),
            labels: job.metadata.labels.clone(),
            document: serde_json::to_value(&job).map_err(|err| {
                tracing::error!(error = %err, "serialising a parsed job failed");
                ApiError::internal()
            })?,
            submitted_by: principal.user.id,
            request_hash,
            idempotency_key: idempotency_key.clone(),
            created_at: Utc::now(),
        };
        match state.submissions.create(&state.store, new_job).await {
            Err(StoreError::Conflict { field, .. })
                if prefix.is_some() && field == "metadata.name" && attempt < 8 =>
            {
                attempt += 1;
            }
            other => break other?,
        }
    };
    if outcome.created {
        let job = &outcome.value;
        state.metrics.job_submitted();
        state.wake_scheduler();
        tracing::info!(job.id = %job.id, tenant.id = %job.tenant_id, job.name = %job.name, "job submitted");
    }
    Ok(outcome)
}

/// Five characters for a generated name, from Kubernetes' alphabet (no vowels, no look-alikes).
fn name_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
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

/// A job whose smallest shape exceeds the tenant's GPU ceiling could never run: refuse it now.
pub(super) fn check_quota(tenant_name: &str, quota: &Quota, job: &DroverJob) -> ApiResult<()> {
    let Some(max_gpus) = quota.max_gpus else {
        return Ok(());
    };
    let resources = &job.spec.resources;
    let min_gpus = u64::from(resources.workers.min) * u64::from(resources.gpus_per_worker);
    if min_gpus > u64::from(max_gpus) {
        return Err(ApiError::invalid(
            "spec.resources.workers.min",
            format!(
                "the job needs at least {min_gpus} GPUs but tenant `{tenant_name}` may hold at most {max_gpus}"
            ),
        ));
    }
    Ok(())
}

/// `train.init_from` must name a checkpoint of one of the tenant's jobs.
async fn check_init_from(
    state: &AppState,
    principal: &Principal,
    job: &DroverJob,
) -> ApiResult<()> {
    let Some(init) = job.spec.train.as_ref().and_then(|t| t.init_from.as_ref()) else {
        return Ok(());
    };
    let field = "spec.train.init_from.checkpoint";
    let missing = || {
        ApiError::invalid(
            field,
            format!(
                "no checkpoint `{}` in the tenant (`drover checkpoints JOB` lists a job's)",
                init.checkpoint
            ),
        )
    };
    let id = uuid::Uuid::parse_str(&init.checkpoint).map_err(|_| missing())?;
    let checkpoint = state
        .store
        .checkpoint_by_id(id)
        .await
        .map_err(|err| ApiError::from_store(err, || "checkpoint".into()))?
        .ok_or_else(missing)?;
    match state
        .store
        .get_job(
            crate::store::Scope::Tenant(principal.user.tenant_id),
            checkpoint.job_id,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(StoreError::NotFound) => Err(missing()),
        Err(err) => Err(ApiError::from_store(err, || "job".into())),
    }
}

/// A tenant may keep only so many jobs waiting, so that no tenant can fill the database. Concurrent
/// submissions may overshoot the ceiling by their number.
async fn check_waiting_jobs(state: &AppState, principal: &Principal) -> ApiResult<()> {
    let ceiling = state.limits.max_queued_jobs_per_tenant;
    if ceiling == 0 {
        return Ok(());
    }
    let waiting = state
        .store
        .count_waiting_jobs(principal.user.tenant_id)
        .await?;
    if waiting < u64::from(ceiling) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_waiting_jobs",
        format!(
            "tenant `{}` has {waiting} jobs waiting, its ceiling: submit again once some have started or been cancelled",
            principal.user.tenant_name
        ),
    ))
}

/// Parses a job id from a path; a malformed id is simply an unknown job.
pub fn parse_job_id(raw: &str) -> ApiResult<JobId> {
    raw.parse()
        .map_err(|_| ApiError::not_found(format!("no job `{raw}`")))
}

/// Get one job, with its whole spec.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}", tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses((status = 200, body = JobEnvelope), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<JobEnvelope>> {
    let job_id = parse_job_id(&id)?;
    let job = state
        .store
        .get_job(principal.scope(), job_id)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
    let model = job_models(&state, &job).await?;
    let queue = super::queue::position_of(&state, &job).await?;
    let mut view = JobView::from(job);
    view.model = model;
    view.queue = queue;
    Ok(Json(JobEnvelope { job: view }))
}

/// The job's fitted models, when it has reported a step.
async fn job_models(state: &AppState, job: &Job) -> ApiResult<Option<JobModels>> {
    if job.generation == 0 {
        return Ok(None);
    }
    let local;
    let observer = match &state.runtime {
        Some(runtime) => &runtime.observer,
        None => {
            local = Observer::default();
            &local
        }
    };
    let observed = observer.refresh(state.store.as_ref(), job.id).await?;
    if observed.steps_done == 0 {
        return Ok(None);
    }
    let tasks = state.store.generation_tasks(job.id, job.generation).await?;
    let workers = tasks
        .iter()
        .filter(|t| t.key.role == TaskRole::Worker)
        .count() as u32;
    let shape = match parse_spec(job.document.as_deref()) {
        Some(spec) if !job.state.holds_resources() || workers == 0 => Shape {
            ps: spec.spec.resources.ps.max,
            workers: spec.spec.resources.workers.max,
        },
        _ => Shape {
            ps: tasks.len() as u32 - workers,
            workers,
        },
    };
    Ok(Some(JobModels::of(job, &observed, shape)))
}

/// List jobs, newest first.
#[utoipa::path(
    get, path = "/api/v1/jobs", tag = "jobs",
    params(
        ("state" = Option<String>, Query, description = "Comma-separated states, e.g. `queued,running`"),
        ("label" = Option<String>, Query, description = "`key=value` (comma-separated or repeated): jobs carrying all of them"),
        ("tenant" = Option<String>, Query, description = "Cluster administrators: only this tenant's jobs"),
        ("limit" = Option<u32>, Query, description = "Page size, 1 to 500 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`meta.next_cursor` of the previous page"),
        ("name" = Option<String>, Query, description = "Only jobs whose name contains this text"),
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
    if let Some(name) = query.get("name").map(str::trim).filter(|n| !n.is_empty()) {
        if name.len() > 253 {
            return Err(ApiError::bad_request("name", "at most 253 characters"));
        }
        filter.name_contains = Some(name.to_ascii_lowercase());
    }
    if let Some(cursor) = query.get("cursor") {
        filter.before = Some(decode_cursor(cursor).ok_or_else(|| {
            ApiError::bad_request(
                "cursor",
                "not a cursor this server issued; pass meta.next_cursor unchanged",
            )
        })?);
    }
    let scope = super::tenant_scope(&state, &principal, query.get("tenant"), "jobs").await?;
    // One row more than asked tells whether another page exists.
    let page = filter.limit;
    filter.limit = page + 1;
    let mut jobs = state.store.list_jobs(scope, &filter).await?;
    let next_cursor = if jobs.len() > page as usize {
        jobs.truncate(page as usize);
        jobs.last().map(|job| encode_cursor(job.id))
    } else {
        None
    };
    Ok(Json(JobList {
        jobs: jobs.into_iter().map(JobView::from).collect(),
        meta: ListMeta { next_cursor },
    }))
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

pub fn encode_cursor(id: JobId) -> String {
    URL_SAFE_NO_PAD.encode(id.0.as_bytes())
}

fn decode_cursor(cursor: &str) -> Option<JobId> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    uuid::Uuid::from_slice(&bytes).ok().map(JobId)
}

/// Every state change of a job, oldest first, with its reason.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/events", tag = "jobs",
    params(
        ("id" = String, Path, description = "Job id"),
        ("limit" = Option<u32>, Query, description = "Page size, 1 to 500 (default 100)"),
        ("cursor" = Option<String>, Query, description = "`meta.next_cursor` of the previous page"),
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
