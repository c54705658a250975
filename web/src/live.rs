//! Live pages: one server-sent-event stream per page. The server reads the store on the page's
//! behalf about once a second (so any replica serves it, and a page costs a few indexed reads per
//! second however many metrics arrive) and sends only what changed: redrawn fragments of the page,
//! new log lines, and a nudge to redraw the chart. Each event's id is a cursor; a reconnecting
//! browser sends it back as `Last-Event-ID` and the stream goes on from there, without repeats.
//! Streams are pulled, never buffered ahead, and capped per user, tenant and server
//! ([`drover_service::streams::Streams`]).

use crate::job::{EventsTable, event_rows, log_text, summary};
use crate::page::error_page;
use crate::session::Session;
use askama::Template;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use drover_api::extract::QueryPairs;
use drover_api::routes::jobs as api;
use drover_api::state::AppState;
use drover_core::JobId;
use drover_store::{LogFilter, LogWindow, Scope};
use futures::stream::{self, Stream};
use std::convert::Infallible;
use std::time::Duration;

const POLL: Duration = Duration::from_secs(1);
/// Log lines sent per event at most; a burst is spread over several.
const LOG_BATCH: u32 = 500;

/// A live stream's place among its user's, its tenant's and the server's streams
/// ([`drover_service::streams::Streams`], shared with followed logs); past a ceiling the page is
/// refused with 503 and polls by reloading, as a browser without streams would. It lasts
/// [`drover_service::streams::Streams::LIFETIME`]; the browser then reconnects (from its
/// `Last-Event-ID`), and its session is checked again.
struct Permit {
    _slot: drover_service::streams::StreamSlot,
    until: tokio::time::Instant,
}

impl Permit {
    fn expired(&self) -> bool {
        tokio::time::Instant::now() >= self.until
    }
}

fn permit(state: &AppState, session: &Session) -> Option<Permit> {
    let slot = state
        .streams
        .open(session.principal.user.id, session.principal.user.tenant_id)
        .ok()?;
    Some(Permit {
        _slot: slot,
        until: tokio::time::Instant::now() + drover_service::streams::Streams::LIFETIME,
    })
}

fn too_many_streams() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "too many live pages are open on this server, or for this user",
    )
        .into_response()
}

/// Where a job's stream stands: the last event, log line and step it has sent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct JobCursor {
    event: i64,
    log: i64,
    step: u64,
}

impl JobCursor {
    fn encode(self) -> String {
        format!("{}.{}.{}", self.event, self.log, self.step)
    }

    fn decode(raw: &str) -> Option<Self> {
        let mut parts = raw.split('.');
        let cursor = JobCursor {
            event: parts.next()?.parse().ok()?,
            log: parts.next()?.parse().ok()?,
            step: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(cursor)
    }
}

struct JobStream {
    state: AppState,
    scope: Scope,
    job: JobId,
    cursor: JobCursor,
    /// Events waiting to be sent, from the last read.
    pending: std::collections::VecDeque<Event>,
    first: bool,
    /// The last read found the job final.
    final_seen: bool,
    ended: bool,
    permit: Permit,
}

/// `GET /jobs/{id}/live?event=…&log=…&step=…`: the job page's stream. The query says what the
/// page already shows; `Last-Event-ID` (a reconnect) takes precedence.
pub async fn job(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let view = match drover_service::jobs::get(&state, &session.principal, &id).await {
        Ok(detail) => api::job_view(detail),
        Err(err) => return error_page(err.into()),
    };
    let Some(permit) = permit(&state, &session) else {
        return too_many_streams();
    };
    let from_query = || {
        let pairs: Vec<(String, String)> =
            serde_urlencoded::from_str(query.as_deref().unwrap_or("")).unwrap_or_default();
        let get = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == key)
                .and_then(|(_, v)| v.parse().ok())
        };
        JobCursor {
            event: get("event").unwrap_or(0),
            log: get("log").unwrap_or(0),
            step: get("step").map_or(0, |s: i64| u64::try_from(s).unwrap_or(0)),
        }
    };
    let cursor = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(JobCursor::decode)
        .unwrap_or_else(from_query);
    let stream = JobStream {
        state,
        scope: session.principal.scope(),
        job: JobId(view.id),
        cursor,
        pending: Default::default(),
        first: true,
        final_seen: false,
        ended: false,
        permit,
    };
    Sse::new(job_events(stream))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn job_events(stream: JobStream) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold(stream, |mut s| async move {
        loop {
            if let Some(event) = s.pending.pop_front() {
                return Some((Ok(event), s));
            }
            if s.ended || *s.state.stopping.borrow() || s.permit.expired() {
                return None;
            }
            if !s.first {
                let mut stopping = s.state.stopping.clone();
                tokio::select! {
                    () = tokio::time::sleep(POLL) => {}
                    _ = stopping.changed() => return None,
                }
            }
            s.first = false;
            if let Err(err) = s.read().await {
                tracing::debug!(error = %err, job.id = %s.job, "live job stream ends");
                return None;
            }
        }
    })
}

impl JobStream {
    /// Reads what changed since the cursor and queues the events that tell the page.
    async fn read(&mut self) -> Result<(), drover_store::StoreError> {
        let store = &self.state.store;
        let job = store.get_job(self.scope, self.job).await?;
        let mut next = self.cursor;
        // One indexed probe a second; the whole timeline only when it changed.
        let newer = store
            .list_job_events(self.scope, self.job, Some(self.cursor.event), 1)
            .await?;
        if !newer.is_empty() {
            let events = store
                .list_job_events(self.scope, self.job, None, 1000)
                .await?;
            next.event = events.last().map_or(0, |e| e.id);
            let mut view = drover_api::views::JobView::from(job.clone());
            view.queue = drover_service::queue::position_of(&self.state, &job)
                .await
                .ok()
                .flatten();
            if let Ok(html) = summary(&view).render() {
                self.pending
                    .push_back(Event::default().event("summary").data(html));
            }
            let table = EventsTable {
                events: event_rows(&events),
            };
            if let Ok(html) = table.render() {
                self.pending
                    .push_back(Event::default().event("events").data(html));
            }
        }
        // Every line after the cursor is read once; contract lines are not shown (the page's tail
        // leaves them out too).
        let logs = store
            .list_logs(
                self.scope,
                self.job,
                &LogFilter::default(),
                LogWindow::after(self.cursor.log),
                LOG_BATCH,
            )
            .await?;
        if let Some(last) = logs.last() {
            next.log = last.id;
            let lines: Vec<String> = logs.iter().filter(|l| !l.contract).map(log_text).collect();
            if !lines.is_empty() {
                self.pending.push_back(
                    Event::default()
                        .event("log")
                        .data(serde_json::to_string(&lines).unwrap_or_default()),
                );
            }
        }
        let was_final = std::mem::replace(&mut self.final_seen, job.state.is_final());
        let step = store
            .last_steps(&[self.job])
            .await?
            .first()
            .map_or(0, |(_, step)| *step);
        if step != self.cursor.step {
            next.step = step;
            // The first points: the page learns which metrics there are to draw.
            let names = if self.cursor.step == 0 {
                store.metric_names(self.scope, self.job).await?
            } else {
                Vec::new()
            };
            let data = serde_json::json!({"step": step, "names": names});
            self.pending
                .push_back(Event::default().event("metrics").data(data.to_string()));
        }
        // A finished job's stream ends once everything it wrote has been sent: one more read after
        // the one that saw it final, for lines that arrive just after its last task's exit.
        if job.state.is_final() && logs.is_empty() && was_final {
            self.ended = true;
            self.pending
                .push_back(Event::default().event("end").data(job.state.as_str()));
        }
        if next != self.cursor || self.ended {
            self.cursor = next;
            if let Some(last) = self.pending.back_mut() {
                *last = std::mem::take(last).id(next.encode());
            }
        }
        Ok(())
    }
}

/// `GET /jobs/live?…filters`: the jobs table's stream; redraws the rows when they change.
pub async fn jobs(
    State(state): State<AppState>,
    session: Session,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(permit) = permit(&state, &session) else {
        return too_many_streams();
    };
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query.as_deref().unwrap_or("")).unwrap_or_default();
    let pairs: Vec<(String, String)> = pairs
        .into_iter()
        .filter(|(k, v)| {
            ["state", "tenant", "label", "name", "cursor", "limit"].contains(&k.as_str())
                && !v.is_empty()
        })
        .collect();
    let (reader, session) = (state.clone(), std::sync::Arc::new(session));
    rows_stream(state, permit, POLL * 2, move || {
        let (state, session, pairs) = (reader.clone(), session.clone(), pairs.clone());
        async move {
            let listed = api::list_page(&state, &session.principal, &QueryPairs(pairs))
                .await
                .ok()?;
            let rows = crate::jobs::rows(&state, listed.jobs).await.ok()?;
            crate::jobs::RowsFragment { rows }.render().ok()
        }
    })
}

/// `GET /queue/live?tenant=…&offset=…`: the queue page's stream. Every few seconds it reads the
/// same page of the queue (the service's view) and sends its rows when they changed: the order,
/// reasons and predictions follow the scheduler's rounds and forecasts without a reload.
pub async fn queue(
    State(state): State<AppState>,
    session: Session,
    axum::extract::Query(query): axum::extract::Query<crate::cluster::QueueQuery>,
) -> Response {
    // A page that would be refused is refused here too, before a stream is opened.
    if let Err(err) = crate::cluster::queue_view(&state, &session, &query).await {
        return error_page(err);
    }
    let Some(permit) = permit(&state, &session) else {
        return too_many_streams();
    };
    let (reader, session) = (state.clone(), std::sync::Arc::new(session));
    rows_stream(state, permit, POLL * 5, move || {
        let (state, session, query) = (reader.clone(), session.clone(), query.clone());
        async move {
            let view = crate::cluster::queue_view(&state, &session, &query)
                .await
                .ok()?;
            crate::cluster::queue_rows(&view).render().ok()
        }
    })
}

/// A table's stream: `read` renders its rows every `every`, and they are sent (as a `rows` event)
/// when they differ from the last sent. The first read is sent too: the page was rendered before the
/// stream connected, and a row that changed in between is in the first read but not on the page (a
/// baseline taken here would hide it until the next change). A failed read ends the stream.
fn rows_stream<F, Fut>(state: AppState, permit: Permit, every: Duration, read: F) -> Response
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Option<String>> + Send,
{
    let start = (state, None::<String>, permit, read);
    let events = stream::unfold(start, move |(state, last, permit, read)| async move {
        loop {
            if last.is_some() {
                let mut stopping = state.stopping.clone();
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    _ = stopping.changed() => return None,
                }
            }
            if *state.stopping.borrow() || permit.expired() {
                return None;
            }
            let html = read().await?;
            if last.as_ref() != Some(&html) {
                let event = Event::default().event("rows").data(html.clone());
                return Some((
                    Ok::<_, Infallible>(event),
                    (state, Some(html), permit, read),
                ));
            }
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_survives_the_round_trip_and_garbage_is_refused() {
        let cursor = JobCursor {
            event: 12,
            log: 3400,
            step: 99,
        };
        assert_eq!(JobCursor::decode(&cursor.encode()), Some(cursor));
        for bad in ["", "1.2", "1.2.3.4", "a.b.c", "1.2.-3"] {
            assert_eq!(JobCursor::decode(bad), None, "{bad}");
        }
    }
}
