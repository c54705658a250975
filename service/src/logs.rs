//! A job's log, for every entrance (REST pages, its followed stream and its text download; the
//! dashboard's log page and the job page's tail): the reader's filter (one task, one generation, a
//! search, contract lines shown or not) read from its query text once, with the field at fault in
//! any error, and a page of lines from the start, the end, or either side of a line, with whether
//! more lie beyond it each way.

use crate::Service;
use crate::auth::Principal;
use crate::error::{ServiceError, ServiceResult};
use drover_core::JobId;
use drover_store::{LogFilter, LogLine, LogWindow, Scope, TaskRole};

/// The longest search text accepted, in characters.
pub const MAX_SEARCH_CHARS: usize = 200;

/// A reader's filter as its query gave it: each value the raw text of a parameter, if present.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogQuery<'a> {
    /// `worker-0`, `ps-1`, …
    pub task: Option<&'a str>,
    pub generation: Option<&'a str>,
    /// Text the lines must contain (ASCII case ignored).
    pub search: Option<&'a str>,
    /// `true` shows contract lines (metrics and checkpoint announcements), `false` (the default)
    /// hides them.
    pub metrics: Option<&'a str>,
}

/// A task's name as logs show it (`worker-0`), split into role and index.
pub fn parse_task(text: &str) -> Option<(TaskRole, u32)> {
    let (role, index) = text.rsplit_once('-')?;
    let role: TaskRole = role.parse().ok()?;
    let index: u32 = index.parse().ok()?;
    Some((role, index))
}

/// The filter `query` asks for; a value that cannot be read is an error naming its parameter
/// (`task`, `generation`, `q`, `metrics`).
pub fn filter(query: LogQuery<'_>) -> ServiceResult<LogFilter> {
    let task = match query.task.filter(|t| !t.is_empty()) {
        None => None,
        Some(text) => Some(parse_task(text).ok_or_else(|| {
            ServiceError::bad_request(
                "task",
                format!(
                    "`{text}` is not a task: expected a role and an index, like worker-0 or ps-1"
                ),
            )
        })?),
    };
    let generation = match query.generation {
        None => None,
        Some(text) => match text.parse::<u64>() {
            Ok(g) if (1..=i64::MAX as u64).contains(&g) => Some(g),
            _ => {
                return Err(ServiceError::bad_request(
                    "generation",
                    format!("`{text}` is not a generation: expected a whole number from 1"),
                ));
            }
        },
    };
    let contains = match query.search.filter(|s| !s.is_empty()) {
        None => None,
        Some(text) if text.chars().count() > MAX_SEARCH_CHARS => {
            return Err(ServiceError::bad_request(
                "q",
                format!(
                    "the search text is {} characters; at most {MAX_SEARCH_CHARS}",
                    text.chars().count()
                ),
            ));
        }
        Some(text) => Some(text.to_owned()),
    };
    let hide_contract = match query.metrics {
        None | Some("false") => true,
        Some("true") => false,
        Some(other) => {
            return Err(ServiceError::bad_request(
                "metrics",
                format!("`{other}`: expected true or false"),
            ));
        }
    };
    Ok(LogFilter {
        task,
        generation,
        contains,
        hide_contract,
    })
}

/// Lines a search reads for one page, at most, from where the page starts: a search of a long log
/// goes on from where the last page stopped rather than reading the whole log at once.
pub const SEARCH_SPAN: u32 = 25_000;

/// A page of a job's log, in line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPage {
    pub lines: Vec<LogLine>,
    /// Lines passing the filter lie (or, past where a search stopped, may lie) before the page:
    /// the `before` cursor that reads them.
    pub earlier: Option<i64>,
    /// Likewise after the page (for now: a running job adds more): the `after` cursor.
    pub later: Option<i64>,
    /// A search stopped after reading [`SEARCH_SPAN`] lines, short of the end of the log in the
    /// page's direction.
    pub search_stopped: bool,
}

/// At most `limit` lines of the job that pass `filter`, from `window`, and whether more lie either
/// side. Scoped like the job: another tenant's job is not found. A search reads at most
/// [`SEARCH_SPAN`] lines each way.
pub async fn page(
    service: &Service,
    principal: &Principal,
    job: JobId,
    filter: &LogFilter,
    window: LogWindow,
    limit: u32,
) -> ServiceResult<LogPage> {
    let scope = principal.scope();
    let not_found = |err| ServiceError::from_store(err, || format!("no job `{job}`"));
    let (read, edge) = bounded(service, scope, job, filter, window).await?;
    // One line more than asked, in the window's direction, says whether more lie that way.
    let mut lines = service
        .store
        .list_logs(scope, job, filter, read, limit + 1)
        .await
        .map_err(not_found)?;
    let overflow = lines.len() > limit as usize;
    if !window.last {
        lines.truncate(limit as usize);
    } else if overflow {
        lines.remove(0);
    }
    // Beyond the page on its own side, the extra row told, or where the search stopped; on the
    // other, a probe (none past the end of a range read from the end with nothing after it).
    let onward = match (overflow, edge) {
        (true, _) => None,
        (false, Some(edge)) => Some(edge),
        (false, None) => None,
    };
    let (earlier, later) = if window.last {
        let earlier = if overflow {
            lines.first().map(|l| l.id)
        } else {
            onward
        };
        let later = match lines.last() {
            Some(last) if window.before.is_some() => {
                probe(service, scope, job, filter, LogWindow::after(last.id))
                    .await?
                    .then_some(last.id)
            }
            _ => None,
        };
        (earlier, later)
    } else {
        let later = if overflow {
            lines.last().map(|l| l.id)
        } else {
            onward
        };
        let earlier = match lines.first() {
            Some(first) => probe(service, scope, job, filter, LogWindow::before(first.id))
                .await?
                .then_some(first.id),
            None => None,
        };
        (earlier, later)
    };
    Ok(LogPage {
        lines,
        earlier,
        later,
        search_stopped: edge.is_some() && !overflow,
    })
}

/// `window` cut to the [`SEARCH_SPAN`] lines from its start when `filter` searches, and the id of
/// the last line it then reads when lines lie beyond it (where the next page goes on from).
async fn bounded(
    service: &Service,
    scope: Scope,
    job: JobId,
    filter: &LogFilter,
    window: LogWindow,
) -> ServiceResult<(LogWindow, Option<i64>)> {
    if filter.contains.is_none() {
        return Ok((window, None));
    }
    let edge = service
        .store
        .log_edge(scope, job, window, SEARCH_SPAN)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no job `{job}`")))?;
    let Some(edge) = edge else {
        return Ok((window, None));
    };
    let mut read = window;
    if window.last {
        read.after = Some(read.after.map_or(edge - 1, |a| a.max(edge - 1)));
    } else {
        read.before = Some(read.before.map_or(edge + 1, |b| b.min(edge + 1)));
    }
    // Lines beyond the edge exist only if the window goes on past it.
    let beyond = if window.last {
        window.after.is_none_or(|a| a < edge - 1)
    } else {
        window.before.is_none_or(|b| b > edge + 1)
    };
    Ok((read, beyond.then_some(edge)))
}

/// Whether any line passing `filter` lies in `window` (a search reads at most [`SEARCH_SPAN`]
/// lines of it, and says yes when lines lie past those).
async fn probe(
    service: &Service,
    scope: Scope,
    job: JobId,
    filter: &LogFilter,
    window: LogWindow,
) -> ServiceResult<bool> {
    let (read, edge) = bounded(service, scope, job, filter, window).await?;
    if edge.is_some() {
        return Ok(true);
    }
    let found = service
        .store
        .list_logs(scope, job, filter, read, 1)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no job `{job}`")))?;
    Ok(!found.is_empty())
}
