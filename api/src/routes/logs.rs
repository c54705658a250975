//! `/api/v1/jobs/{id}/logs`: a job's log as pages from either end, as a stream that follows it
//! (`follow=true`), or whole as text (`format=text`), each filtered alike (one task, one generation,
//! a search, contract lines shown or not; [`drover_service::logs`]). Tenant-scoped like the job.

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{PathParam, QueryPairs};
use crate::routes::jobs::parse_job_id;
use crate::run_views::{LogLineView, LogList, LogMeta};
use crate::state::AppState;
use axum::Json;
use axum::body::Body as ResponseBody;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use drover_core::JobId;
use drover_service::auth::Principal;
use drover_service::logs::LogQuery;
use drover_service::streams::Refusal;
use drover_store::{LogFilter, LogLine, LogWindow, Scope};
use std::time::Duration;

const MAX_PAGE: u32 = 5000;
/// How often a followed log polls the store for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(300);

/// Where the page lies: the lines after `cursor` and before `before` (either end open), the first of
/// them, or the last with `tail=true` or with `before` alone (the lines just before it).
fn window(query: &QueryPairs) -> ApiResult<LogWindow> {
    let before = query
        .get("before")
        .map(|raw| {
            raw.parse::<i64>().map_err(|_| {
                ApiError::bad_request(
                    "before",
                    "not a line id; pass meta.prev_cursor (or a line's id) unchanged",
                )
            })
        })
        .transpose()?;
    let tail = match query.get("tail") {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::bad_request("tail", "expected true or false")),
    };
    let after = query.id_cursor()?;
    Ok(LogWindow {
        after,
        before,
        last: tail || (before.is_some() && after.is_none()),
    })
}

/// The job's log lines (every task and generation unless filtered) in order. With `follow=true` the
/// response is a stream of JSON lines that stays open until the job ends; with `format=text`, every
/// matching line as a text file.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/logs", tag = "jobs",
    params(
        ("id" = String, Path, format = Uuid, description = "Job id"),
        ("follow" = Option<bool>, Query, description = "Stream new lines (application/x-ndjson) until the job ends"),
        ("format" = Option<String>, Query, pattern = "^(json|text)$", description = "`json` (default), or `text`: every matching line as a text file (`time [gN task] line`), for download"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 5000, description = "Page size, 1 to 5000 (default 1000); ignored when following or downloading"),
        ("cursor" = Option<i64>, Query, description = "Lines after this line id (`meta.next_cursor`)"),
        ("before" = Option<i64>, Query, description = "Lines before this line id (`meta.prev_cursor`): alone, the lines just before it; with `cursor`, the lines between the two"),
        ("tail" = Option<bool>, Query, description = "The last lines (of the range `cursor` and `before` give) rather than the first"),
        ("task" = Option<String>, Query, pattern = "^((worker|ps)-[0-9]{1,9})?$", description = "One task's lines: `worker-0`, `ps-1`, …"),
        ("generation" = Option<u64>, Query, minimum = 1, maximum = 9223372036854775807_u64, description = "One generation's lines"),
        ("q" = Option<String>, Query, max_length = 200, description = "Lines containing this text, ASCII case ignored (at most 200 characters)"),
        ("metrics" = Option<bool>, Query, description = "Include contract lines (`{\"drover\": \"metrics\"|\"checkpoint\", …}`); left out by default"),
    ),
    responses(
        (status = 200, description = "A page of lines; with `follow=true`, a stream of lines (`LogLineView`) as newline-delimited JSON; with `format=text`, plain text",
         content((LogList = "application/json"), (LogLineView = "application/x-ndjson"), (String = "text/plain"))),
        (status = 400, description = "A parameter that cannot be read, named in `field`", body = ErrorBody),
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
    query.only(&[
        "follow",
        "format",
        "limit",
        "cursor",
        "before",
        "tail",
        "task",
        "generation",
        "q",
        "metrics",
    ])?;
    let job_id = parse_job_id(&id)?;
    let filter = drover_service::logs::filter(LogQuery {
        task: query.get("task"),
        generation: query.get("generation"),
        search: query.get("q"),
        metrics: query.get("metrics"),
    })?;
    let window = window(&query)?;
    let follow = match query.get("follow") {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::bad_request("follow", "expected true or false")),
    };
    let text = match query.get("format") {
        None | Some("json") => false,
        Some("text") => true,
        Some(_) => return Err(ApiError::bad_request("format", "expected json or text")),
    };
    let limit = query.limit(1000, MAX_PAGE)?;
    if follow && text {
        return Err(ApiError::bad_request(
            "format",
            "a followed log is JSON lines; download the text without follow",
        ));
    }
    if text {
        return download(state, principal, job_id, filter).await;
    }
    if !follow {
        let page =
            drover_service::logs::page(&state, &principal, job_id, &filter, window, limit).await?;
        // Read forwards, the next page starts where this one stopped (its last line, or where a
        // search stopped reading); read from the end, after its newest line.
        let next_cursor = match (page.later, window.last) {
            (Some(id), false) => Some(id.to_string()),
            _ => page
                .lines
                .last()
                .map(|l| l.id.to_string())
                .or_else(|| window.after.map(|id| id.to_string())),
        };
        let prev_cursor = page.earlier.map(|id| id.to_string());
        return Ok(Json(LogList {
            logs: page.lines.into_iter().map(LogLineView::from).collect(),
            meta: LogMeta {
                next_cursor,
                prev_cursor,
                more: page.later.is_some(),
            },
        })
        .into_response());
    }
    let slot = state
        .streams
        .open(principal.user.id, principal.user.tenant_id)
        .map_err(|refusal| {
            let status = match refusal {
                Refusal::User | Refusal::Tenant => axum::http::StatusCode::TOO_MANY_REQUESTS,
                Refusal::Server => axum::http::StatusCode::SERVICE_UNAVAILABLE,
            };
            ApiError::new(status, "too_many_streams", refusal.message())
        })?;
    // A followed log starts where asked (the last lines with `tail=true`), then reads every line
    // after the last it read and passes on those the filter lets through: lines it leaves out are
    // read once, not again at every poll.
    let scope = principal.scope();
    let (first, cursor) = if window.last {
        // The last lines first (of the range asked), then every line after the newest now.
        let first = drover_service::logs::page(&state, &principal, job_id, &filter, window, limit)
            .await?
            .lines;
        let newest = state
            .store
            .list_logs(scope, job_id, &LogFilter::default(), LogWindow::LAST, 1)
            .await
            .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
        (first, newest.last().map_or(0, |l| l.id))
    } else {
        (Vec::new(), window.after.unwrap_or(0))
    };
    let start = Follow {
        state,
        scope,
        job: job_id,
        filter,
        cursor,
        pending: first.into_iter().map(LogLineView::from).collect(),
        done: false,
        until: tokio::time::Instant::now() + drover_service::streams::Streams::LIFETIME,
        _slot: slot,
    };
    let mut response = ResponseBody::from_stream(follow_stream(start)).into_response();
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
    filter: LogFilter,
    /// The last line read, passed on or not.
    cursor: i64,
    pending: Vec<LogLineView>,
    done: bool,
    /// The end of its lifetime: the client reconnects from its last line's id.
    until: tokio::time::Instant,
    _slot: drover_service::streams::StreamSlot,
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
    start: Follow,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send {
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
                .list_logs(
                    follow.scope,
                    follow.job,
                    &LogFilter::default(),
                    LogWindow::after(follow.cursor),
                    MAX_PAGE,
                )
                .await
            {
                Ok(lines) if !lines.is_empty() => {
                    follow.cursor = lines.last().map_or(follow.cursor, |l| l.id);
                    follow.pending = lines
                        .into_iter()
                        .filter(|l| follow.filter.matches(l))
                        .map(LogLineView::from)
                        .collect();
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

/// One line of the text download: `2026-01-02T03:04:05.678Z [g1 worker-0] text`.
fn text_line(out: &mut Vec<u8>, line: &LogLine) {
    use std::io::Write;
    let _ = writeln!(
        out,
        "{} [g{} {}-{}] {}",
        line.logged_at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        line.generation,
        line.role.as_str(),
        line.index,
        line.line
    );
}

/// Every line passing `filter`, as a text file, read from the store a page at a time as the client
/// takes it (a log of millions of lines is never held whole).
async fn download(
    state: AppState,
    principal: Principal,
    job: JobId,
    filter: LogFilter,
) -> ApiResult<Response> {
    let scope = principal.scope();
    let name = crate::attachment::job_name(&state, scope, job).await?;
    let pages = futures::stream::unfold(Some(0_i64), move |cursor| {
        let state = state.clone();
        let filter = filter.clone();
        async move {
            let after = cursor?;
            match state
                .store
                .list_logs(scope, job, &filter, LogWindow::after(after), MAX_PAGE)
                .await
            {
                Ok(lines) if lines.is_empty() => None,
                Ok(lines) => {
                    let mut out = Vec::with_capacity(lines.len() * 96);
                    for line in &lines {
                        text_line(&mut out, line);
                    }
                    let next = (lines.len() == MAX_PAGE as usize)
                        .then(|| lines.last().map(|l| l.id))
                        .flatten();
                    Some((Ok::<_, std::io::Error>(bytes::Bytes::from(out)), next))
                }
                Err(err) => Some((Err(std::io::Error::other(err.to_string())), None)),
            }
        }
    });
    Ok(crate::attachment::streamed(
        pages,
        "text/plain; charset=utf-8",
        &format!("{name}.log"),
    ))
}
